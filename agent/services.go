package agent

import (
	"context"
	"errors"

	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// serviceLister caches the cluster's Services for the service environment
// variables of containers (KUBERNETES_SERVICE_HOST...), from one informer as
// the kubelet's service lister.
type serviceLister struct {
	lister corelisters.ServiceLister
	synced cache.InformerSynced
}

// newServiceLister returns nil on a standalone node (no API server, no
// services).
func newServiceLister(lc fx.Lifecycle, a apiClients) *serviceLister {
	if a.Clients == nil {
		return nil
	}
	factory := informers.NewSharedInformerFactoryWithOptions(a.Clients.Client, 0)
	informer := factory.Core().V1().Services()
	l := &serviceLister{lister: informer.Lister(), synced: informer.Informer().HasSynced}
	stop := make(chan struct{})
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			factory.Start(stop)
			return nil
		},
		OnStop: func(context.Context) error {
			close(stop)
			factory.Shutdown()
			return nil
		},
	})
	return l
}

// errServicesNotSynced is what a container that needs service variables
// waits on until the services were listed once, as in the kubelet.
var errServicesNotSynced = errors.New("services have not yet been read at least once, cannot construct envvars")

// List returns every Service, or an error before they were listed once.
// The Services are shared with the cache: callers must not modify them.
func (l *serviceLister) List() ([]*v1.Service, error) {
	if !l.synced() {
		return nil, errServicesNotSynced
	}
	return l.lister.List(labels.Everything())
}
