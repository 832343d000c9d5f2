package imagepull_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	cri "k8s.io/cri-api/pkg/apis"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/imagepull"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// The secrets of the tests: a and b hold the same credentials (hash h1),
// c other ones.
var (
	secretA = kubeletconfig.ImagePullSecret{UID: "uid-a", Namespace: "team", Name: "a", CredentialHash: "h1"}
	secretB = kubeletconfig.ImagePullSecret{UID: "uid-b", Namespace: "team", Name: "b", CredentialHash: "h1"}
	secretC = kubeletconfig.ImagePullSecret{UID: "uid-c", Namespace: "other", Name: "c", CredentialHash: "h2"}
)

// env is a node: a fake runtime's image service, a root directory, a fake
// clock, and the log lines of the Managers made on it.
type env struct {
	t      *testing.T
	root   string
	images cri.ImageManagerService
	cri    *fakecri.Server
	clk    *clocktesting.FakeClock
	logs   *[]string
	ctx    context.Context
}

func newEnv(t *testing.T) *env {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	srv := fakecri.New(fakecri.Options{Clock: clk})
	_, images := srv.InProcess()
	var lines []string
	logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	return &env{t: t, root: t.TempDir(), images: images, cri: srv, clk: clk, logs: &lines, ctx: klog.NewContext(context.Background(), logger)}
}

// manager makes a Manager on the node's records, as an agent (re)starting.
func (e *env) manager(policy kubeletconfig.ImagePullCredentialsVerificationPolicy, allowlist ...string) *imagepull.Manager {
	e.t.Helper()
	m, err := imagepull.New(imagepull.Options{RootDir: e.root, Images: e.images, Policy: policy, Allowlist: allowlist, Clock: e.clk})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := m.Init(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	return m
}

// add puts an image into the runtime (present on the node, however it got
// there) and returns its ID.
func (e *env) add(ref string) string {
	e.t.Helper()
	img, err := fakecri.NewImage(ref, 1)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.cri.AddImage(img)
}

// pull records a successful pull of image as id with creds.
func (e *env) pull(m *imagepull.Manager, image, id string, creds *kubeletconfig.ImagePullCredentials) {
	e.t.Helper()
	if err := m.RecordPullIntent(e.ctx, image); err != nil {
		e.t.Fatal(err)
	}
	m.RecordImagePulled(e.ctx, image, id, creds)
}

func (e *env) file(dir, key string) string {
	return filepath.Join(e.root, "image_manager", dir, fmt.Sprintf("sha256-%x", sha256.Sum256([]byte(key))))
}

// must asks whether a pod with secrets must pull image (id).
func must(t *testing.T, e *env, m *imagepull.Manager, image, id string, secrets ...kubeletconfig.ImagePullSecret) bool {
	t.Helper()
	asked := false
	got, err := m.MustAttemptImagePull(e.ctx, image, id, func() ([]kubeletconfig.ImagePullSecret, *kubeletconfig.ImagePullServiceAccount, error) {
		if asked {
			t.Error("pod credentials asked twice")
		}
		asked = true
		return secrets, nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func withSecret(s kubeletconfig.ImagePullSecret) *kubeletconfig.ImagePullCredentials {
	return &kubeletconfig.ImagePullCredentials{KubernetesSecrets: []kubeletconfig.ImagePullSecret{s}}
}

// TestPolicies: each policy's answer for an image found on the node
// (preloaded), one the node pulled with secret a, one pulled without
// credentials, for pods with secret a, secret b (same credentials), secret
// c and none.
func TestPolicies(t *testing.T) {
	const (
		preloaded = "registry.example/team/preloaded:1"
		private   = "registry.example/team/private:1"
		public    = "registry.example/team/public:1"
	)
	type answers struct{ a, b, c, none bool } // must pull, for each pod
	for _, tc := range []struct {
		policy                     kubeletconfig.ImagePullCredentialsVerificationPolicy
		allowlist                  []string
		preloaded, private, public answers
	}{
		{policy: kubeletconfig.NeverVerify},
		{policy: "", private: answers{c: true, none: true}}, // the default
		{policy: kubeletconfig.NeverVerifyPreloadedImages, private: answers{c: true, none: true}},
		{policy: kubeletconfig.AlwaysVerify, preloaded: answers{true, true, true, true}, private: answers{c: true, none: true}},
		{policy: kubeletconfig.NeverVerifyAllowlistedImages, allowlist: []string{"registry.example/team/preloaded"},
			private: answers{c: true, none: true}},
		{policy: kubeletconfig.NeverVerifyAllowlistedImages, allowlist: []string{"registry.example/*"}},
		{policy: kubeletconfig.NeverVerifyAllowlistedImages, allowlist: []string{"registry.example/other/*"},
			preloaded: answers{true, true, true, true}, private: answers{c: true, none: true}},
	} {
		t.Run(fmt.Sprintf("%s %v", tc.policy, tc.allowlist), func(t *testing.T) {
			e := newEnv(t)
			m := e.manager(tc.policy, tc.allowlist...)
			ids := map[string]string{preloaded: e.add(preloaded), private: e.add(private), public: e.add(public)}
			e.pull(m, private, ids[private], withSecret(secretA))
			e.pull(m, public, ids[public], &kubeletconfig.ImagePullCredentials{NodePodsAccessible: true})
			for image, want := range map[string]answers{preloaded: tc.preloaded, private: tc.private, public: tc.public} {
				got := answers{
					a:    must(t, e, m, image, ids[image], secretA),
					b:    must(t, e, m, image, ids[image], secretB),
					c:    must(t, e, m, image, ids[image], secretC),
					none: must(t, e, m, image, ids[image]),
				}
				if got != want {
					t.Errorf("%s: must pull for pods with secret a, b, c, none: %+v, want %+v", image, got, want)
				}
			}
		})
	}
}

// TestRecordsInKubeletFormat: the files are the kubelet's, byte for byte,
// and a kubelet's (v1alpha1 ones rewritten as v1beta1) are read.
func TestRecordsInKubeletFormat(t *testing.T) {
	e := newEnv(t)
	m := e.manager("")
	id := e.add("registry.example/team/app:1")
	if err := m.RecordPullIntent(e.ctx, "registry.example/team/app:1"); err != nil {
		t.Fatal(err)
	}
	intent, err := os.ReadFile(e.file("pulling", "registry.example/team/app:1"))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1beta1","image":"registry.example/team/app:1"}` + "\n"; string(intent) != want {
		t.Errorf("intent file %q, want %q", intent, want)
	}
	m.RecordImagePulled(e.ctx, "registry.example/team/app:1", id, withSecret(secretA))
	if _, err := os.Stat(e.file("pulling", "registry.example/team/app:1")); !os.IsNotExist(err) {
		t.Errorf("the intent is still there after the pull: %v", err)
	}
	record, err := os.ReadFile(e.file("pulled", id))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","lastUpdatedTime":"2030-01-01T00:00:00Z","imageRef":"` + id +
		`","credentialMapping":{"registry.example/team/app":{"kubernetesSecrets":[{"uid":"uid-a","namespace":"team","name":"a","credentialHash":"h1"}]}}}` + "\n"
	if string(record) != want {
		t.Errorf("record file\n%s\nwant\n%s", record, want)
	}
	for _, dir := range []string{"", "pulling", "pulled"} {
		if st, err := os.Stat(filepath.Join(e.root, "image_manager", dir)); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("image_manager/%s: %v, %v; want a 0700 directory", dir, st.Mode(), err)
		}
	}
	if st, err := os.Stat(e.file("pulled", id)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("record file mode %v, %v; want 0600", st.Mode(), err)
	}

	// A kubelet v1.34's record (v1alpha1) of another image, pulled with
	// secret c: read, honoured and rewritten as v1beta1.
	other := e.add("registry.example/team/other:2")
	old := `{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1alpha1","lastUpdatedTime":"2029-06-01T12:00:00Z","imageRef":"` + other +
		`","credentialMapping":{"registry.example/team/other":{"kubernetesSecrets":[{"uid":"uid-c","namespace":"other","name":"c","credentialHash":"h2"}]}}}` + "\n"
	if err := os.WriteFile(e.file("pulled", other), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	m = e.manager("")
	if must(t, e, m, "registry.example/team/other:2", other, secretC) {
		t.Error("the kubelet's record of secret c is not honoured")
	}
	if !must(t, e, m, "registry.example/team/other:2", other, secretA) {
		t.Error("secret a may use an image the kubelet pulled with secret c")
	}
	rewritten, err := os.ReadFile(e.file("pulled", other))
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(old, "v1alpha1", "v1beta1", 1); string(rewritten) != want {
		t.Errorf("v1alpha1 record rewritten as\n%s\nwant\n%s", rewritten, want)
	}
}

// TestRecordsSurviveRestart: what one agent recorded decides for the next
// one on the node, and secrets found to match are remembered.
func TestRecordsSurviveRestart(t *testing.T) {
	e := newEnv(t)
	const image = "registry.example/team/app:1"
	id := e.add(image)
	e.pull(e.manager(""), image, id, withSecret(secretA))

	m := e.manager("")
	if must(t, e, m, image, id, secretA) {
		t.Error("after a restart, the secret that pulled the image must pull again")
	}
	if !must(t, e, m, image, id) || !must(t, e, m, image, id, secretC) {
		t.Error("after a restart, a pod without the credentials may use the image")
	}
	// Secret b, same credentials as a: allowed, and remembered.
	if must(t, e, m, image, id, secretB) {
		t.Error("a secret with the same credentials must pull")
	}
	// Secret a with new credentials: still allowed by its coordinates, and
	// its new hash is remembered.
	renewed := secretA
	renewed.CredentialHash = "h3"
	if must(t, e, m, image, id, renewed) {
		t.Error("the same secret with new credentials must pull")
	}
	data, err := os.ReadFile(e.file("pulled", id))
	if err != nil {
		t.Fatal(err)
	}
	want := `"kubernetesSecrets":[{"uid":"uid-a","namespace":"team","name":"a","credentialHash":"h3"},{"uid":"uid-b","namespace":"team","name":"b","credentialHash":"h1"}]`
	if !strings.Contains(string(data), want) {
		t.Errorf("record %s, want the secrets %s", data, want)
	}
	// Another secret with the credentials a had: b's hash lets it in.
	d := kubeletconfig.ImagePullSecret{UID: "uid-d", Namespace: "team", Name: "d", CredentialHash: "h1"}
	if must(t, e, e.manager(""), image, id, d) {
		t.Error("a secret with b's credentials must pull after a restart")
	}
}

// TestCrashLeftIntent: an agent that stopped between the intent and the
// record leaves the image counted as pulled by the kubelet: a pod must
// prove access (here, no record says who may: every pod pulls), and the
// next agent turns the intent into a record when the image is there.
func TestCrashLeftIntent(t *testing.T) {
	e := newEnv(t)
	const image, absent = "registry.example/team/app:1", "registry.example/team/gone:1"
	m := e.manager("")
	for _, img := range []string{image, absent} {
		if err := m.RecordPullIntent(e.ctx, img); err != nil {
			t.Fatal(err)
		}
	}
	// The pull of image completed in the runtime, then the agent crashed.
	id := e.add(image)
	if !must(t, e, m, image, id, secretA) {
		t.Error("during the pull, a pod may use the image without proof")
	}

	m = e.manager("")
	if _, err := os.Stat(e.file("pulling", image)); !os.IsNotExist(err) {
		t.Errorf("the intent of a present image is still there after a restart: %v", err)
	}
	if _, err := os.Stat(e.file("pulled", id)); err != nil {
		t.Errorf("no record for the image of a left intent: %v", err)
	}
	if !must(t, e, m, image, id, secretA) || !must(t, e, m, image, id) {
		t.Error("a pod may use an image whose pull a crash interrupted without pulling")
	}
	// The image of the other intent is not in the runtime: the intent
	// stays, and if the image turns up under that name a pod must pull.
	if _, err := os.Stat(e.file("pulling", absent)); err != nil {
		t.Errorf("the intent of an absent image went: %v", err)
	}
	if !must(t, e, m, absent, e.add(absent)) {
		t.Error("an image named by a left intent is trusted as preloaded")
	}
	// A pull of it completes now: the intent goes and the record says who
	// may use it.
	e.pull(m, absent, e.add(absent), withSecret(secretA))
	if _, err := os.Stat(e.file("pulling", absent)); !os.IsNotExist(err) {
		t.Errorf("the intent is still there after the pull: %v", err)
	}
}

// TestConcurrentPullsKeepTheIntent: the intent of an image two pods pull
// at once goes only when both pulls ended.
func TestConcurrentPullsKeepTheIntent(t *testing.T) {
	e := newEnv(t)
	const image = "registry.example/team/app:1"
	m := e.manager("")
	for range 2 {
		if err := m.RecordPullIntent(e.ctx, image); err != nil {
			t.Fatal(err)
		}
	}
	m.RecordImagePullFailed(e.ctx, image)
	if _, err := os.Stat(e.file("pulling", image)); err != nil {
		t.Fatalf("the intent went while a pull is in flight: %v", err)
	}
	m.RecordImagePulled(e.ctx, image, e.add(image), withSecret(secretA))
	if _, err := os.Stat(e.file("pulling", image)); !os.IsNotExist(err) {
		t.Fatalf("the intent is still there after both pulls: %v", err)
	}
}

// TestCorruptRecords: records that cannot be decoded never stop the
// agent: they are logged with their file names and prove nothing (a pod
// pulls), and a new pull replaces them.
func TestCorruptRecords(t *testing.T) {
	e := newEnv(t)
	const image = "registry.example/team/app:1"
	id := e.add(image)
	e.pull(e.manager(""), image, id, &kubeletconfig.ImagePullCredentials{NodePodsAccessible: true})
	for _, f := range []struct{ path, content string }{
		{e.file("pulled", id), `{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","imageRef":"` + id + `"`},
		{e.file("pulling", "x:1"), `{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1beta1","image":"x:1","extra":1}`},
		{e.file("pulled", "other"), `{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1beta1","image":"x:1"}`},
	} {
		if err := os.WriteFile(f.path, []byte(f.content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	m := e.manager("")
	logs := strings.Join(*e.logs, "\n")
	for _, f := range []string{e.file("pulled", id), e.file("pulling", "x:1"), e.file("pulled", "other")} {
		if !strings.Contains(logs, f) {
			t.Errorf("the unreadable record %s is not named in the logs:\n%s", filepath.Base(f), logs)
		}
	}
	if !must(t, e, m, image, id) {
		t.Error("a pod may use an image whose record cannot be read without pulling")
	}
	e.pull(m, image, id, withSecret(secretA))
	if must(t, e, e.manager(""), image, id, secretA) {
		t.Error("the pull did not replace the unreadable record")
	}
}

// TestPruneUnknownRecords: the image GC's hook removes the records of the
// images that are gone, but not those written since the collection began.
func TestPruneUnknownRecords(t *testing.T) {
	e := newEnv(t)
	m := e.manager("")
	kept, gone, late := e.add("a.example/kept:1"), e.add("a.example/gone:1"), e.add("a.example/late:1")
	e.pull(m, "a.example/kept:1", kept, withSecret(secretA))
	e.pull(m, "a.example/gone:1", gone, withSecret(secretA))
	began := e.clk.Now().Add(time.Second)
	e.clk.Step(2 * time.Second)
	e.pull(m, "a.example/late:1", late, withSecret(secretA))
	m.PruneUnknownRecords(e.ctx, []string{kept}, began)
	for id, want := range map[string]bool{kept: true, gone: false, late: true} {
		if _, err := os.Stat(e.file("pulled", id)); (err == nil) != want {
			t.Errorf("record of %s present %v, want %v", id, err == nil, want)
		}
	}
	// The image of the pruned record, back on the node (preloaded this
	// time), is trusted as one the kubelet did not pull.
	if must(t, e, m, "a.example/gone:1", gone) {
		t.Error("the pruned record still counts")
	}
}

// TestMetrics: kubelet_imagemanager_image_mustpull_checks_total counts
// the answers by result; the gauges count the records on disk and the
// caches' use (with maxPods 1: 2 intents, 5 records).
func TestMetrics(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	m, err := imagepull.New(imagepull.Options{RootDir: e.root, Images: e.images, Clock: e.clk, Registerer: reg, MaxPods: 1})
	if err != nil {
		t.Fatal(err)
	}
	id := e.add("a.example/app:1")
	e.pull(m, "a.example/app:1", id, withSecret(secretA))
	if err := m.RecordPullIntent(e.ctx, "a.example/other:1"); err != nil {
		t.Fatal(err)
	}
	gauges := `
# HELP kubelet_imagemanager_inmemory_pulledrecords_usage_percent The ImagePulledRecords in-memory cache usage in percent.
# TYPE kubelet_imagemanager_inmemory_pulledrecords_usage_percent gauge
kubelet_imagemanager_inmemory_pulledrecords_usage_percent 20
# HELP kubelet_imagemanager_inmemory_pullintents_usage_percent The ImagePullIntents in-memory cache usage in percent.
# TYPE kubelet_imagemanager_inmemory_pullintents_usage_percent gauge
kubelet_imagemanager_inmemory_pullintents_usage_percent 50
# HELP kubelet_imagemanager_ondisk_pulledrecords Number of ImagePulledRecords stored on disk.
# TYPE kubelet_imagemanager_ondisk_pulledrecords gauge
kubelet_imagemanager_ondisk_pulledrecords 1
# HELP kubelet_imagemanager_ondisk_pullintents Number of ImagePullIntents stored on disk.
# TYPE kubelet_imagemanager_ondisk_pullintents gauge
kubelet_imagemanager_ondisk_pullintents 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(gauges), "kubelet_imagemanager_inmemory_pulledrecords_usage_percent",
		"kubelet_imagemanager_inmemory_pullintents_usage_percent", "kubelet_imagemanager_ondisk_pulledrecords", "kubelet_imagemanager_ondisk_pullintents"); err != nil {
		t.Error(err)
	}
	must(t, e, m, "a.example/app:1", id, secretA)
	must(t, e, m, "a.example/app:1", id)
	must(t, e, m, "a.example/pre:1", e.add("a.example/pre:1"))
	want := `
# HELP kubelet_imagemanager_image_mustpull_checks_total Counter for how many times kubelet checked whether credentials need to be re-verified to access an image
# TYPE kubelet_imagemanager_image_mustpull_checks_total counter
kubelet_imagemanager_image_mustpull_checks_total{result="credentialPolicyAllowed"} 1
kubelet_imagemanager_image_mustpull_checks_total{result="credentialRecordFound"} 1
kubelet_imagemanager_image_mustpull_checks_total{result="mustAuthenticate"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "kubelet_imagemanager_image_mustpull_checks_total"); err != nil {
		t.Error(err)
	}
}

// TestNewRefusesBadOptions: New checks the policy and its allowlist.
func TestNewRefusesBadOptions(t *testing.T) {
	e := newEnv(t)
	for _, o := range []imagepull.Options{
		{Images: e.images},
		{RootDir: e.root},
		{RootDir: e.root, Images: e.images, Policy: "Sometimes"},
		{RootDir: e.root, Images: e.images, Policy: kubeletconfig.AlwaysVerify, Allowlist: []string{"a.example/x"}},
		{RootDir: e.root, Images: e.images, Policy: kubeletconfig.NeverVerifyAllowlistedImages, Allowlist: []string{"a.example/x:1"}},
	} {
		if _, err := imagepull.New(o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
}
