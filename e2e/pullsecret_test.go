package e2e

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// authRegistry is an in-memory OCI registry on loopback (containerd pulls
// from a loopback registry over plain HTTP) that answers only requests
// with its basic-auth credentials, counting the others.
type authRegistry struct {
	host, user, password string
	refused, served      atomic.Int64
}

// startAuthRegistry serves an authRegistry until the test ends.
func startAuthRegistry(t *testing.T) *authRegistry {
	t.Helper()
	r := &authRegistry{user: "e2e", password: "pull-secret-" + t.Name()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.host = ln.Addr().String()
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if u, p, ok := req.BasicAuth(); !ok || u != r.user || p != r.password {
			r.refused.Add(1)
			w.Header().Set("WWW-Authenticate", `Basic realm="nodekit-e2e"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		r.served.Add(1)
		inner.ServeHTTP(w, req)
	}), ReadHeaderTimeout: podTimeout}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

// push copies the image of the docker archive at archive (tagged tag in
// it) to repo:tag on the registry and returns the reference pods use. The
// copy gets a label naming repo, so it is an image of its own (another
// image ID): the image pull manager keeps its records by image ID, and a
// copy identical to the side-loaded image would make the node count that
// one as pulled with credentials too, so that pods using it by its own
// name would have to pull it (as with the kubelet).
func (r *authRegistry) push(t *testing.T, archive, tag, repo string) string {
	t.Helper()
	src, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(archive, &src)
	if err != nil {
		t.Fatalf("read %s from %s: %v", tag, archive, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	if cfg.Config.Labels == nil {
		cfg.Config.Labels = map[string]string{}
	}
	cfg.Config.Labels["nodekit.e2e/private-copy"] = repo
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		t.Fatal(err)
	}
	ref := r.host + "/" + repo
	dst, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(dst, img, remote.WithAuth(&authn.Basic{Username: r.user, Password: r.password}), remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return ref
}

// dockerConfigSecret is a kubernetes.io/dockerconfigjson Secret holding
// r's credentials.
func (r *authRegistry) dockerConfigSecret(t *testing.T, ns, name string) *v1.Secret {
	t.Helper()
	auth := base64.StdEncoding.EncodeToString([]byte(r.user + ":" + r.password))
	data, err := json.Marshal(map[string]any{"auths": map[string]any{
		r.host: map[string]string{"username": r.user, "password": r.password, "auth": auth},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Type:       v1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{v1.DockerConfigJsonKey: data},
	}
}

// testPullSecret: an image of a registry that wants credentials is pulled
// with the pod's imagePullSecrets (the pod runs, the registry served the
// agent's authenticated pulls), and a pod without them fails to pull it
// (ErrImagePull, a Failed event naming the image). The pod without
// credentials goes first, so no copy of the image is on the node yet.
// Once the image is present, a pod without the credentials still cannot
// use it (it pulls, and fails), and a pod with another secret holding the
// same credentials uses it without pulling (package imagepull).
func testPullSecret(t *testing.T, n *podNode) {
	ctx := t.Context()
	reg := startAuthRegistry(t)
	image := reg.push(t, filepath.Join(n.containerd.Dir, "busybox.tar"), cluster.BusyboxImage, "e2e/private:1.0")

	denied := n.pod("no-pull-secret", "sleep", "3600")
	denied.Spec.Containers[0].Image = image
	denied.Spec.Containers[0].ImagePullPolicy = v1.PullAlways
	denied = n.createPod(t, denied)
	waitForPod(t, denied.Namespace, denied.Name, "ErrImagePull or ImagePullBackOff", pullFailing)
	if ev := waitForPodEvent(t, denied.Namespace, denied.Name, "Failed"); !strings.Contains(ev.Message, image) {
		t.Errorf("Failed event %q does not name the image %s", ev.Message, image)
	}
	if reg.refused.Load() == 0 {
		t.Errorf("the registry refused no request: the pod without credentials did not try to pull")
	}

	secret := reg.dockerConfigSecret(t, n.ns, "registry-credentials")
	if _, err := env.cp.Client().CoreV1().Secrets(n.ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	servedBefore := reg.served.Load()
	allowed := n.pod("with-pull-secret", "sleep", "3600")
	allowed.Spec.Containers[0].Image = image
	allowed.Spec.Containers[0].ImagePullPolicy = v1.PullAlways
	allowed.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: secret.Name}}
	allowed = n.createPod(t, allowed)
	ready := waitForPod(t, allowed.Namespace, allowed.Name, "Running and Ready", isPodReady)
	if served := reg.served.Load() - servedBefore; served == 0 {
		t.Errorf("the registry served no authenticated request for the pod with the pull secret")
	}
	cs, _ := mainStatus(ready)
	if !strings.HasPrefix(cs.ImageID, reg.host+"/e2e/private@sha256:") {
		t.Errorf("container imageID %q, want the pushed image's digest in %s", cs.ImageID, reg.host)
	}
	t.Logf("private image %s: refused %d unauthenticated requests, pulled with the pod's imagePullSecrets (imageID %s)", image, reg.refused.Load(), cs.ImageID)

	// The image is on the node now (KubeletEnsureSecretPulledImages, on by
	// default, policy NeverVerifyPreloadedImages): a pod without the
	// credentials may not use it with IfNotPresent; it pulls with its own
	// (none) and fails.
	refusedBefore := reg.refused.Load()
	reuse := n.pod("present-no-pull-secret", "sleep", "3600")
	reuse.Spec.Containers[0].Image = image
	reuse.Spec.Containers[0].ImagePullPolicy = v1.PullIfNotPresent
	reuse = n.createPod(t, reuse)
	waitForPod(t, reuse.Namespace, reuse.Name, "ErrImagePull or ImagePullBackOff", pullFailing)
	if reg.refused.Load() == refusedBefore {
		t.Errorf("the pod without credentials used the present image without pulling it")
	}

	// Another secret holding the same credentials proves access: the pod
	// uses the present image without a request to the registry.
	copied := reg.dockerConfigSecret(t, n.ns, "registry-credentials-copy")
	if _, err := env.cp.Client().CoreV1().Secrets(n.ns).Create(ctx, copied, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	servedBefore = reg.served.Load()
	same := n.pod("present-same-credentials", "sleep", "3600")
	same.Spec.Containers[0].Image = image
	same.Spec.Containers[0].ImagePullPolicy = v1.PullIfNotPresent
	same.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: copied.Name}}
	same = n.createPod(t, same)
	waitForPod(t, same.Namespace, same.Name, "Running and Ready", isPodReady)
	if ev := waitForPodEvent(t, same.Namespace, same.Name, "Pulled"); !strings.Contains(ev.Message, "already present on machine and can be accessed by the pod") {
		t.Errorf("Pulled event %q, want the image present and accessible", ev.Message)
	}
	if served := reg.served.Load() - servedBefore; served != 0 {
		t.Errorf("the registry served %d requests for a pod whose secret holds the credentials that pulled the present image", served)
	}
}

// pullFailing: the pod's main container waits on a failed pull.
func pullFailing(p *v1.Pod) bool {
	cs, ok := mainStatus(p)
	return ok && cs.State.Waiting != nil && (cs.State.Waiting.Reason == "ErrImagePull" || cs.State.Waiting.Reason == "ImagePullBackOff")
}
