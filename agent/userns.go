package agent

import (
	"path/filepath"

	"go.uber.org/fx"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/ticks"
	"github.com/nodekit/nodekit/userns"
)

// UserNamespaces is the kubelet's user namespace manager (userns.Module):
// pods with hostUsers: false are admitted and run in a user namespace of
// their own, 65,536 host IDs (userNamespaces.idsPerPod) of the node's range
// each, kept in <root-dir>/pods/<uid>/userns so a restart or a handover
// from a kubelet keeps them; the pod manager puts them in the sandbox and
// container configs (runtime.UserNamespaces) and the runtime handlers'
// userNamespaces feature, from the runtime's status, decides whether the
// runtime can run such a pod (the kubelet's FailedCreatePodSandBox
// otherwise). The ranges of pods the agent no longer knows are released
// once the pod sources are ready. CRI includes it. Change its inputs with
// fx.Decorate of userns.Options.
var UserNamespaces = fx.Options(
	fx.Provide(
		provideUserNamespacesOptions,
		func(m *userns.Manager) runtime.UserNamespaces { return m },
	),
	pods.AsSupportedPodFeature(pods.FeatureUserNamespaces),
	userns.Module,
)

func provideUserNamespacesOptions(cfg *Config, store *pods.Store, runtimePods *runtime.PodCache, poller *runtime.StatusPoller, clk clock.Clock, align ticks.Align) userns.Options {
	o := userns.Options{
		Clock:        clk,
		Align:        align,
		PodsDir:      filepath.Join(cfg.RootDir, "pods"),
		MaxPods:      int(cfg.Kubelet.MaxPods),
		Handlers:     poller.Handlers,
		PodKnown:     func(uid types.UID) bool { return store.Known(uid) || runtimePods.HasPod(uid) },
		SourcesReady: store.SourcesReady,
	}
	if u := cfg.Kubelet.UserNamespaces; u != nil && u.IDsPerPod != nil {
		o.IDsPerPod = *u.IDsPerPod
	}
	return o
}
