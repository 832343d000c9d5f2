package runtime_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"

	"github.com/nodekit/nodekit/imagepull"
	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// dockerSecret is a kubernetes.io/dockerconfigjson pull secret with
// user:password for registry.
func dockerSecret(name, registry, user, password string) v1.Secret {
	return v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Type:       v1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{v1.DockerConfigJsonKey: fmt.Appendf(nil,
			`{"auths":{%q:{"username":%q,"password":%q}}}`, registry, user, password)},
	}
}

// pulledRecord is the path of the image pull manager's record of imageRef
// under root.
func pulledRecord(root, imageRef string) string {
	return filepath.Join(root, "image_manager", "pulled", fmt.Sprintf("sha256-%x", sha256.Sum256([]byte(imageRef))))
}

// TestPullCredentialsVerified: with the image pull manager, an image a pod
// pulled with its secret is used by another pod with IfNotPresent only
// when that pod has a secret with the same credentials; a pod without
// them pulls and fails as the kubelet's (ErrImagePull, a Failed event),
// or, under Never, is told the image is not present. Images the node did
// not pull are any pod's.
func TestPullCredentialsVerified(t *testing.T) {
	const image = "registry.example.com/team/app:1"
	root := t.TempDir()
	var pulls *imagepull.Manager
	h := newHarness(t, fakecri.Options{}, func(o *runtime.PodManagerOptions) {
		var err error
		pulls, err = imagepull.New(imagepull.Options{RootDir: root, Images: o.Images, Clock: o.Clock})
		must(t, err)
		o.ImagePulls = pulls
	})
	img, _ := fakecri.NewImage(image, 1)
	id := h.cri.AddPullable(img)
	must(t, h.cri.RequireAuth("registry.example.com/team/app", "alice", "s3cret"))
	creds := dockerSecret("creds", "registry.example.com", "alice", "s3cret")
	same := dockerSecret("same", "https://registry.example.com/v2/", "alice", "s3cret")
	wrong := dockerSecret("wrong", "registry.example.com", "mallory", "guess")
	app := func(policy v1.PullPolicy) v1.Container {
		c := ctr("app")
		c.Image, c.ImagePullPolicy = image, policy
		return c
	}

	if res := h.sync(newPod("first", app(v1.PullIfNotPresent)), nil, creds); res.Err != nil || len(res.Waiting) != 0 {
		t.Fatalf("the pod with the secret: %+v", res)
	}
	wantEvents(t, h.events(), `Normal Pulling Pulling image "`+image+`"`, `Normal Pulled Successfully pulled image "`+image+`"`)
	if _, err := os.Stat(pulledRecord(root, id)); err != nil {
		t.Fatalf("no record of the pull: %v", err)
	}

	for _, tc := range []struct {
		name    string
		secrets []v1.Secret
	}{{"no-secret", nil}, {"wrong-secret", []v1.Secret{wrong}}} {
		pulled := h.cri.Calls("PullImage")
		res := h.sync(newPod(tc.name, app(v1.PullIfNotPresent)), nil, tc.secrets...)
		if w := res.Waiting["app"]; !errors.Is(w.Reason, podstate.ErrImagePull) || !strings.Contains(w.Message, "401") {
			t.Errorf("%s: the present image without its credentials: %+v, want ErrImagePull from the registry", tc.name, res.Waiting)
		}
		if h.cri.Calls("PullImage") == pulled {
			t.Errorf("%s: no pull with the pod's own credentials", tc.name)
		}
		wantEvents(t, h.events(), `Normal Pulling Pulling image "`+image+`"`, `Warning Failed Failed to pull image "`+image+`"`, "Warning Failed Error: ErrImagePull")
	}

	res := h.sync(newPod("never", app(v1.PullNever)), nil)
	if w := res.Waiting["app"]; !errors.Is(w.Reason, podstate.ErrImageNeverPull) {
		t.Errorf("Never without the credentials: %+v, want ErrImageNeverPull", res.Waiting)
	}
	wantEvents(t, h.events(), `Warning ErrImageNeverPull Container image "`+image+`" is not present with pull policy of Never`)

	// Another secret with the same credentials: no pull, for IfNotPresent
	// and Never alike.
	pulled := h.cri.Calls("PullImage")
	for _, name := range []string{"same-secret", "same-secret-never"} {
		policy := v1.PullIfNotPresent
		if strings.HasSuffix(name, "never") {
			policy = v1.PullNever
		}
		if res := h.sync(newPod(name, app(policy)), nil, same); res.Err != nil || len(res.Waiting) != 0 {
			t.Errorf("%s: %+v", name, res)
		}
		wantEvents(t, h.events(), `Normal Pulled Container image "`+image+`" already present on machine and can be accessed by the pod`)
	}
	if h.cri.Calls("PullImage") != pulled {
		t.Error("a pod with a secret of the same credentials pulled")
	}

	// busybox was on the node before the agent: any pod's
	// (NeverVerifyPreloadedImages).
	if res := h.sync(newPod("preloaded", ctr("app")), nil); res.Err != nil || len(res.Waiting) != 0 || h.cri.Calls("PullImage") != pulled {
		t.Errorf("a preloaded image: %+v, %d pulls", res, h.cri.Calls("PullImage")-pulled)
	}

	// Pulled without credentials: any pod may use it then.
	pub, _ := fakecri.NewImage("registry.example.com/public/tool:1", 1)
	h.cri.AddPullable(pub)
	c := ctr("tool")
	c.Image = "registry.example.com/public/tool:1"
	h.sync(newPod("public", c), nil)
	pulled = h.cri.Calls("PullImage")
	if res := h.sync(newPod("public2", c), nil, wrong); res.Err != nil || len(res.Waiting) != 0 || h.cri.Calls("PullImage") != pulled {
		t.Errorf("an image pulled without credentials: %+v, %d pulls", res, h.cri.Calls("PullImage")-pulled)
	}
}

// TestImageGCRemovesPullRecords: the image GC's PostGC hook removes the
// image pull manager's record of an image it removed and keeps the
// record of one in use.
func TestImageGCRemovesPullRecords(t *testing.T) {
	root := t.TempDir()
	var pulls *imagepull.Manager
	h := newImageGCHarness(t, func(o *runtime.ImageGCOptions) {
		o.PostGC = []runtime.PostImageGCHook{func(ctx context.Context, left []string, began time.Time) {
			pulls.PruneUnknownRecords(ctx, left, began)
		}}
	})
	var err error
	pulls, err = imagepull.New(imagepull.Options{RootDir: root, Images: h.client.ImageService(), Clock: h.clk})
	must(t, err)
	record := func(ref string) string {
		id := h.add(ref, 1, false)
		must(t, pulls.RecordPullIntent(h.ctx, ref))
		pulls.RecordImagePulled(h.ctx, ref, id, &kubeletconfig.ImagePullCredentials{NodePodsAccessible: true})
		return id
	}
	unused, used := record("registry.example.com/old:1"), record("registry.example.com/app:1")
	c := ctr("app")
	c.Image = "registry.example.com/app:1"
	h.sync(newPod("runs", c), nil)
	// First seen, then old enough to go.
	for range 2 {
		if err := h.gc.DeleteUnusedImages(h.ctx); err != nil {
			t.Fatal(err)
		}
		h.clk.Step(3 * time.Minute)
	}
	if slices.Contains(h.refs(), "registry.example.com/old:1") {
		t.Fatal("the unused image was not removed")
	}
	if _, err := os.Stat(pulledRecord(root, unused)); !os.IsNotExist(err) {
		t.Errorf("the record of the removed image is still there: %v", err)
	}
	if _, err := os.Stat(pulledRecord(root, used)); err != nil {
		t.Errorf("the record of the image in use went: %v", err)
	}
}
