package imagepull_test

import (
	"context"
	"fmt"
	"os"

	"go.uber.org/fx"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit/imagepull"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// An image a pod pulled with its secret: another pod with a secret of the
// same credentials may use it, a pod without may not, and a Manager
// started later on the same root directory (an agent restarted, or a
// kubelet) reads the same records.
func Example() {
	ctx := context.Background()
	root, _ := os.MkdirTemp("", "kubelet")
	defer os.RemoveAll(root)
	_, images := fakecri.New(fakecri.Options{}).InProcess()
	opts := imagepull.Options{RootDir: root, Images: images} // NeverVerifyPreloadedImages
	m, err := imagepull.New(opts)
	if err != nil {
		panic(err)
	}
	const image, id = "registry.example/team/app:1", "sha256:0123"
	secret := kubeletconfig.ImagePullSecret{Namespace: "team", Name: "creds", UID: "uid-1", CredentialHash: "hash-of-the-credentials"}
	if err := m.RecordPullIntent(ctx, image); err != nil {
		panic(err)
	}
	// ... the runtime pulls the image with the secret's credentials ...
	m.RecordImagePulled(ctx, image, id, &kubeletconfig.ImagePullCredentials{KubernetesSecrets: []kubeletconfig.ImagePullSecret{secret}})

	restarted, _ := imagepull.New(opts)
	pod := func(secrets ...kubeletconfig.ImagePullSecret) func() ([]kubeletconfig.ImagePullSecret, *kubeletconfig.ImagePullServiceAccount, error) {
		return func() ([]kubeletconfig.ImagePullSecret, *kubeletconfig.ImagePullServiceAccount, error) {
			return secrets, nil, nil
		}
	}
	copied := secret
	copied.Name, copied.UID = "copy", "uid-2"
	withCopy, _ := restarted.MustAttemptImagePull(ctx, image, id, pod(copied))
	without, _ := restarted.MustAttemptImagePull(ctx, image, id, pod())
	fmt.Println("must pull, with a copy of the secret:", withCopy, "without:", without)
	// Output: must pull, with a copy of the secret: false without: true
}

// An embedder changes the policy with fx.Decorate of the Options the agent
// provides (the agent's ImagePulls option); here with Module alone.
func ExampleModule() {
	root, _ := os.MkdirTemp("", "kubelet")
	defer os.RemoveAll(root)
	_, images := fakecri.New(fakecri.Options{}).InProcess()
	app := fx.New(fx.NopLogger,
		fx.Supply(imagepull.Options{RootDir: root, Images: images}),
		fx.Decorate(func(o imagepull.Options) imagepull.Options {
			o.Policy = kubeletconfig.AlwaysVerify
			return o
		}),
		imagepull.Module,
		fx.Invoke(func(m *imagepull.Manager) {
			preloaded, _ := m.MustAttemptImagePull(context.Background(), "registry.example/base:1", "sha256:4567", nil)
			fmt.Println("AlwaysVerify, must pull a preloaded image:", preloaded)
		}),
	)
	if err := app.Start(context.Background()); err != nil {
		panic(err)
	}
	_, err := os.Stat(root + "/image_manager/pulled")
	fmt.Println("records opened on start:", err == nil)
	_ = app.Stop(context.Background())
	// Output:
	// AlwaysVerify, must pull a preloaded image: true
	// records opened on start: true
}
