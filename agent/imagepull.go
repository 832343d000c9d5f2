package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
	cri "k8s.io/cri-api/pkg/apis"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/features"
	"github.com/nodekit/nodekit/imagepull"
)

// ImagePulls is the kubelet's image pull manager (package imagepull) while
// the KubeletEnsureSecretPulledImages gate is on (the default): the pod
// manager asks it before a pod uses an image present on the node and
// records each pull's credentials under <root-dir>/image_manager, with the
// policy imagePullCredentialsVerificationPolicy and its
// preloadedImagesVerificationAllowlist; the image GC prunes the records of
// the images it removed. Its records open on start (a directory that
// cannot be made fails the start, as the kubelet's). With the gate off
// there is no manager (*imagepull.Manager is nil in the graph) and a
// present image is used by any pod. CRI includes it. Change its inputs
// with fx.Decorate of imagepull.Options.
var ImagePulls = fx.Options(fx.Provide(provideImagePullOptions, provideImagePulls))

// provideImagePullOptions returns the image pull manager's options from
// the configuration and the graph.
func provideImagePullOptions(cfg *Config, images cri.ImageManagerService, clk clock.Clock, reg prometheus.Registerer) imagepull.Options {
	kc := &cfg.Kubelet
	o := imagepull.Options{
		RootDir:    cfg.RootDir,
		Images:     images,
		Policy:     kc.ImagePullCredentialsVerificationPolicy,
		Allowlist:  kc.PreloadedImagesVerificationAllowlist,
		MaxPods:    int(kc.MaxPods),
		Clock:      clk,
		Registerer: reg,
	}
	if n := kc.MaxParallelImagePulls; n != nil {
		o.MaxParallelPulls = int(*n)
	}
	return o
}

// provideImagePulls builds the manager while the gate is on, nil otherwise.
func provideImagePulls(cfg *Config, o imagepull.Options, lc fx.Lifecycle) (*imagepull.Manager, error) {
	if !featureEnabled(&cfg.Kubelet, features.KubeletEnsureSecretPulledImages) {
		return nil, nil
	}
	m, err := imagepull.New(o)
	if err != nil {
		return nil, err
	}
	lc.Append(fx.StartHook(m.Init))
	return m, nil
}
