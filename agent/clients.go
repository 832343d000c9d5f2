package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"

	"github.com/nodekit/nodekit"
	"github.com/nodekit/nodekit/certificate"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	typedcoordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	clientcert "k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/klog/v2"
)

// Clients are the agent's connections to the apiserver, authenticated with
// the node's kubeconfig. The three clients share one HTTP transport (one
// HTTP/2 connection carries the watches, the heartbeats and the events;
// each client keeps its own rate limit and timeout) and its connection
// tracker, so that CloseConnections drops every connection when heartbeats
// keep failing (a half-open TCP connection otherwise keeps a node NotReady
// for the kernel's retransmission timeout, as the kubelet learned).
type Clients struct {
	// Client is for everything but heartbeats: pods, events, watches. Rate
	// limited by kubeAPIQPS/kubeAPIBurst. Its API group clients are built
	// on first use: an agent uses a handful of client-go's 56 groups.
	Client kubernetes.Interface
	// Heartbeat is for the node Lease and node status: not rate limited, and
	// its requests time out within one status update period (at most the
	// lease duration), as the kubelet's heartbeat client. Only its CoreV1
	// and CoordinationV1 are clients of their own (what the heartbeat
	// writes: the Node and its Lease); its other API groups are Client's. A
	// clientset builds a REST client for every API group (about 38 KiB per
	// agent), which a second clientset would pay for two groups' use.
	Heartbeat kubernetes.Interface
	// Events writes events, rate limited by eventRecordQPS/eventBurst on
	// its own so that a burst of events never delays pod status writes, as
	// the kubelet's event client. Nil means Client.CoreV1(). It is a core/v1
	// client only, not a clientset: a clientset builds a REST client for
	// every API group (about 38 KiB), paid once per agent for nothing.
	Events typedcorev1.EventsGetter

	tracker *connrotation.ConnectionTracker
}

// NewClients builds the clientsets from cfg.KubeconfigPath. It does not
// contact the apiserver.
func NewClients(cfg *Config) (*Clients, error) {
	if cfg.KubeconfigPath == "" {
		return nil, fmt.Errorf("no --kubeconfig given: node %q has no API server to talk to (agent.New runs it standalone)", cfg.NodeName)
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", cfg.KubeconfigPath)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %q: %w", cfg.KubeconfigPath, err)
	}
	return NewClientsFromRESTConfig(cfg, restCfg)
}

// NewClientsFromRESTConfig builds the clientsets from a REST config, applying
// the KubeletConfiguration's client settings (content type, QPS, burst) and
// the kubelet's user agent. restCfg is copied, not modified.
//
// The clientsets share one transport, built once from restCfg: the kubelet
// builds one per clientset, which costs a TLS connection, its buffers and
// its reader goroutines each (three per node, on the apiserver too). They
// do not ask for gzip-compressed responses (rest.Config.DisableCompression):
// a node's lists and watch events are small, and each open watch would
// otherwise hold a gzip decompressor (about 40 KiB) for its lifetime and
// cost the apiserver a compressor. Requests made while the transport has
// no connection wait for the first to make it, so that a start's requests
// open one connection instead of one each (see connGate). An embedder
// that wants otherwise decorates *Clients with its own.
func NewClientsFromRESTConfig(cfg *Config, restCfg *rest.Config) (*Clients, error) {
	c, _, err := newClients(cfg, restCfg, nil)
	return c, err
}

// newClients is NewClientsFromRESTConfig; with a certificate manager the
// shared transport presents its current certificate instead of restCfg's
// credentials (certificate.UpdateTransport), and the returned
// RotatingTransport moves the connections to a renewed one.
func newClients(cfg *Config, restCfg *rest.Config, m clientcert.Manager) (*Clients, *certificate.RotatingTransport, error) {
	kc := &cfg.Kubelet
	base := rest.CopyConfig(restCfg)
	base.UserAgent = "nodekit/" + nodekit.Version + " (" + cfg.NodeName + ")"
	base.ContentType = kc.ContentType
	base.AcceptContentTypes = kc.ContentType
	if kc.ContentType == runtime.ContentTypeProtobuf {
		base.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	}

	tracker := connrotation.NewConnectionTracker()
	dial := (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	// The requests made while the transport has no connection wait for
	// the first to make it (connGate), so that one is made.
	gate := &connGate{}
	dialer := connrotation.NewDialerWithTracker(gate.dial(dial), tracker)
	base.DisableCompression = true
	var rotating *certificate.RotatingTransport
	if m == nil {
		base.Dial = dialer.DialContext
	} else {
		var err error
		base, rotating, err = certificate.UpdateTransport(base, certificate.TransportOptions{
			Manager: m, Dial: dialer.DialContext, CloseAll: tracker.CloseAll,
		})
		if err != nil {
			return nil, nil, err
		}
	}
	transport, err := rest.TransportFor(base)
	if err != nil {
		return nil, nil, fmt.Errorf("build apiserver transport: %w", err)
	}
	gate.rt = transport
	var rt http.RoundTripper = gate
	main := rest.CopyConfig(base)
	main.QPS = float32(*kc.KubeAPIQPS)
	main.Burst = int(kc.KubeAPIBurst)
	// Each client has its own rate limit and timeout
	// (http.Client.Timeout, which client-go also sends as each request's
	// timeout parameter) on the shared transport.
	// The main client's groups are built on first use (lazyClientset).
	client, err := newLazyClientset(main, &http.Client{Transport: rt, Timeout: main.Timeout})
	if err != nil {
		return nil, nil, fmt.Errorf("build apiserver client: %w", err)
	}

	ev := rest.CopyConfig(base)
	ev.QPS = float32(*kc.EventRecordQPS)
	ev.Burst = int(kc.EventBurst)
	if ev.QPS == 0 {
		ev.QPS = -1 // eventRecordQPS 0 means no limit
	}
	events, err := typedcorev1.NewForConfigAndClient(ev, &http.Client{Transport: rt, Timeout: ev.Timeout})
	if err != nil {
		return nil, nil, fmt.Errorf("build event client: %w", err)
	}

	hb := rest.CopyConfig(base)
	hb.QPS = float32(-1)
	hb.Timeout = kc.NodeStatusUpdateFrequency.Duration
	if lease := time.Duration(kc.NodeLeaseDurationSeconds) * time.Second; hb.Timeout > lease {
		hb.Timeout = lease
	}
	hbClient := &http.Client{Transport: rt, Timeout: hb.Timeout}
	core, err := typedcorev1.NewForConfigAndClient(hb, hbClient)
	if err != nil {
		return nil, nil, fmt.Errorf("build heartbeat client: %w", err)
	}
	coordination, err := typedcoordinationv1.NewForConfigAndClient(hb, hbClient)
	if err != nil {
		return nil, nil, fmt.Errorf("build heartbeat client: %w", err)
	}
	heartbeat := &heartbeatClient{Interface: client, core: core, coordination: coordination}
	return &Clients{Client: client, Heartbeat: heartbeat, Events: events, tracker: tracker}, rotating, nil
}

// heartbeatClient is Clients.Heartbeat: the heartbeat's own core/v1 and
// coordination/v1 clients, every other group the main clientset's.
type heartbeatClient struct {
	kubernetes.Interface
	core         typedcorev1.CoreV1Interface
	coordination typedcoordinationv1.CoordinationV1Interface
}

func (h *heartbeatClient) CoreV1() typedcorev1.CoreV1Interface { return h.core }

func (h *heartbeatClient) CoordinationV1() typedcoordinationv1.CoordinationV1Interface {
	return h.coordination
}

// CloseConnections closes every open connection to the apiserver so the
// next request dials afresh. Safe for concurrent use.
func (c *Clients) CloseConnections() {
	if c.tracker != nil {
		c.tracker.CloseAll()
	}
}

// newRecorder returns an event recorder that writes events as the kubelet
// does (source component "kubelet", host = node name) through client, and a
// func that stops it. Each event written is logged at verbosity 4 with
// logger (the kubelet logs them with a second watcher of its broadcaster,
// StartStructuredLogging). The recorder is client-go's in all it sends
// (see eventRecorder) without the broadcaster's fixed queues.
func newRecorder(cfg *Config, logger logr.Logger, client typedcorev1.EventsGetter, scheme *runtime.Scheme) (record.EventRecorder, func(context.Context) error) {
	// The rate limit is the event client's; the spam filter and
	// aggregation keep client-go's defaults, as the kubelet's.
	return newEventRecorder(scheme, v1.EventSource{Component: "kubelet", Host: cfg.NodeName}, logger, writeEvents(loggingSink{
		EventSink: &typedcorev1.EventSinkImpl{Interface: client.Events("")},
		logger:    logger.V(4),
	}, eventRetryPeriod))
}

// loggingSink logs each event it writes, as the broadcaster's structured
// logging would.
type loggingSink struct {
	record.EventSink
	logger logr.Logger
}

func (s loggingSink) log(e *v1.Event) {
	s.logger.Info("Event occurred", "object", klog.KRef(e.InvolvedObject.Namespace, e.InvolvedObject.Name),
		"fieldPath", e.InvolvedObject.FieldPath, "kind", e.InvolvedObject.Kind, "apiVersion", e.InvolvedObject.APIVersion,
		"type", e.Type, "reason", e.Reason, "message", e.Message, "count", e.Count)
}

func (s loggingSink) Create(e *v1.Event) (*v1.Event, error) {
	s.log(e)
	return s.EventSink.Create(e)
}

func (s loggingSink) Update(e *v1.Event) (*v1.Event, error) {
	s.log(e)
	return s.EventSink.Update(e)
}

func (s loggingSink) Patch(old *v1.Event, data []byte) (*v1.Event, error) {
	s.log(old)
	return s.EventSink.Patch(old, data)
}
