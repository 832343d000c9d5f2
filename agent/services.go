package agent

import (
	"context"
	"errors"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// ServiceLister lists the cluster's Services for the containers' service
// environment variables (KUBERNETES_SERVICE_HOST...), or fails before they
// were listed once; the Services are shared with a cache and must not be
// modified. It must be safe for concurrent use.
//
// The agent's own (CRI) watches every Service with the node's client, as
// the kubelet's service lister. Services are cluster-wide, the same for
// every node: an embedder running many agents in one process can give them
// one, e.g. from NewServiceLister on a client of its own, with
//
//	fx.Replace(agent.ServiceLister(shared))
//
// (fx.Replace does not build the agent's own, so no per-agent watch is
// opened). It is nil on a standalone node.
type ServiceLister func() ([]*v1.Service, error)

// NewServiceLister returns a ServiceLister backed by one informer on
// client's Services, and run, which runs the informer until ctx is done,
// logging with ctx's logger. It does no I/O before run.
func NewServiceLister(client kubernetes.Interface) (ServiceLister, func(ctx context.Context)) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0)
	informer := factory.Core().V1().Services()
	list := newListerFunc(informer.Lister(), informer.Informer().HasSynced)
	return list, func(ctx context.Context) {
		factory.StartWithContext(ctx)
		<-ctx.Done()
		factory.Shutdown()
	}
}

// newServiceLister is the agent's own ServiceLister, watching from start to
// stop; nil on a standalone node (no API server, no services).
func newServiceLister(lc fx.Lifecycle, logger logr.Logger, a apiClients) ServiceLister {
	if a.Clients == nil {
		return nil
	}
	list, run := NewServiceLister(a.Clients.Client)
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan struct{})
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			go func() {
				defer close(done)
				run(ctx)
			}()
			return nil
		},
		OnStop: func(context.Context) error {
			cancel()
			<-done
			return nil
		},
	})
	return list
}

// errServicesNotSynced is what a container that needs service variables
// waits on until the services were listed once, as in the kubelet.
var errServicesNotSynced = errors.New("services have not yet been read at least once, cannot construct envvars")

func newListerFunc(lister interface {
	List(labels.Selector) ([]*v1.Service, error)
}, synced cache.InformerSynced) ServiceLister {
	return func() ([]*v1.Service, error) {
		if !synced() {
			return nil, errServicesNotSynced
		}
		return lister.List(labels.Everything())
	}
}
