package agent

import (
	"path/filepath"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit/nodeshutdown"
	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/status"
)

// Names and order of the node shutdown manager's admit handler: after the
// general predicates, as the kubelet adds it last.
const (
	AdmitNodeShutdown = "NodeShutdown"
	OrderNodeShutdown = 300
)

// NodeShutdown is the kubelet's graceful node shutdown (nodeshutdown.Module)
// configured from the *Config (Config.NodeShutdownOptions: shutdownGracePeriod,
// shutdownGracePeriodCriticalPods, shutdownGracePeriodByPodPriority, the
// state file in the root directory). When a grace period is set and a node
// shutdown is signalled it gates the Ready condition (a status.HealthCheck:
// Ready=False "node is shutting down", synced at once through
// status.Reporter.SyncNow), rejects new pods (the NodeShutdown admit handler,
// after GeneralPredicates) and kills the pods of the pods.Store through the
// pod loop (pods.Controller.KillPod) in priority order. Core and Standalone
// include it.
//
// The signal comes from systemd-logind (a delay inhibitor lock over D-Bus)
// where systemd and the system bus run and, when Config.NodeShutdownSignal
// is set (--node-shutdown-signal; off by default), from SIGPWR
// (nodeshutdown.DefaultSignal) sent to the agent: an init system or an
// operator sends it before stopping the node. SIGTERM still only stops the
// agent. Replace the sources with fx.Decorate of nodeshutdown.Options
// (Sources), or add one with nodeshutdown.AsSource.
var NodeShutdown = fx.Options(
	fx.Provide(
		provideNodeShutdownOptions,
		func(s *pods.Store) nodeshutdown.ActivePodsFunc { return s.Active },
		func(c *pods.Controller) nodeshutdown.KillPodFunc { return c.KillPod },
	),
	// Admission and the Ready condition read the *nodeshutdown.Gate the
	// manager sets, not the manager, which acts through the loop and the
	// status reporter that read them.
	pods.AsAdmitHandler(AdmitNodeShutdown, OrderNodeShutdown, nodeShutdownAdmitHandler),
	status.AsHealthCheck(nodeShutdownHealthCheck),
	nodeshutdown.Module,
)

// NodeShutdownOptions returns the node shutdown manager's options from the
// KubeletConfiguration: the grace periods and the kubelet's state file
// (<root-dir>/graceful_node_shutdown_state). Sources, the pod funcs,
// SyncNodeStatus, NodeRef and the recorder, clock and registerer are the
// caller's (or NodeShutdown's) to fill.
func (cfg *Config) NodeShutdownOptions() nodeshutdown.Options {
	kc := &cfg.Kubelet
	return nodeshutdown.Options{
		GracePeriod:              kc.ShutdownGracePeriod.Duration,
		GracePeriodCriticalPods:  kc.ShutdownGracePeriodCriticalPods.Duration,
		GracePeriodByPodPriority: kc.ShutdownGracePeriodByPodPriority,
		NodeName:                 cfg.NodeName,
		StateFile:                filepath.Join(cfg.RootDir, nodeshutdown.StateFileName),
	}
}

type nodeShutdownParams struct {
	fx.In

	Config   *Config
	Reporter *status.Reporter
	Node     *status.NodeWatch
	Logger   logr.Logger `optional:"true"`
}

// provideNodeShutdownOptions completes Config.NodeShutdownOptions from the
// graph and picks the sources: logind where it runs, and SIGPWR when
// Config.NodeShutdownSignal is set.
func provideNodeShutdownOptions(p nodeShutdownParams) (nodeshutdown.Options, error) {
	o := p.Config.NodeShutdownOptions()
	o.SyncNodeStatus = p.Reporter.SyncNow
	o.NodeRef = NodeEventRef(p.Config.NodeName, p.Node)
	periods, err := nodeshutdown.GracePeriods(o.GracePeriod, o.GracePeriodCriticalPods, o.GracePeriodByPodPriority)
	if err != nil || len(periods) == 0 {
		return o, err
	}
	logger := p.Logger.WithName("nodeshutdown")
	if logger.GetSink() == nil {
		logger = logr.Discard()
	}
	o.Sources = nodeShutdownSources(logger, nodeshutdown.LogindAvailable(), p.Config.NodeShutdownSignal, periods)
	return o, nil
}

// nodeShutdownSources returns the node shutdown sources: logind's when it
// runs, then the agent's signal when opted in; it logs which, and says so
// when there is none (the grace period is then accepted but no shutdown is
// ever seen).
func nodeShutdownSources(logger logr.Logger, logind, signal bool, periods []kubeletconfig.ShutdownGracePeriodByPodPriority) []nodeshutdown.Source {
	var sources []nodeshutdown.Source
	if logind {
		sources = append(sources, nodeshutdown.NewLogindSource(nodeshutdown.LogindOptions{InhibitDelay: nodeshutdown.PeriodRequested(periods)}))
	}
	var sig *nodeshutdown.SignalSource
	if signal {
		sig = nodeshutdown.NewSignalSource(nodeshutdown.DefaultSignal)
		sources = append(sources, sig)
	}
	switch {
	case logind && sig != nil:
		logger.Info("Graceful node shutdown: watching systemd-logind and the agent's signal", "signal", sig.String(), "shutdownGracePeriodByPodPriority", periods)
	case logind:
		logger.Info("Graceful node shutdown: watching systemd-logind", "shutdownGracePeriodByPodPriority", periods)
	case sig != nil:
		logger.Info("Graceful node shutdown: no systemd-logind on this machine (no /run/systemd/system or no D-Bus system bus); send the agent the signal before the node stops", "signal", sig.String(), "shutdownGracePeriodByPodPriority", periods)
	default:
		logger.Info("Graceful node shutdown is configured but not implemented on this machine: no systemd-logind (no /run/systemd/system or no D-Bus system bus) and the shutdown signal is off; start the agent with --node-shutdown-signal and send it SIGPWR before the node stops", "shutdownGracePeriodByPodPriority", periods)
	}
	return sources
}

// nodeShutdownAdmitHandler rejects pods while the node shuts down.
func nodeShutdownAdmitHandler(g *nodeshutdown.Gate) pods.AdmitHandler {
	return pods.AdmitFunc(func(a pods.AdmitAttributes) pods.AdmitResult {
		ok, reason, message := g.Admit(a.Pod)
		return pods.AdmitResult{Admit: ok, Reason: reason, Message: message}
	})
}

// nodeShutdownHealthCheck makes the node NotReady while it shuts down, with
// the kubelet's message.
func nodeShutdownHealthCheck(g *nodeshutdown.Gate) status.HealthCheck {
	return status.HealthCheck{Name: "NodeShutdown", Healthy: func() (bool, error) {
		err := g.ShutdownStatus()
		return err == nil, err
	}}
}
