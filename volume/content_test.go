package volume

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodekit/nodekit/internal/testenv"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"
)

func configMap(name string, data map[string]string) *v1.ConfigMap {
	return &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Data: data}
}

func secret(name string, data map[string]string) *v1.Secret {
	s := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func TestConfigMapVolume(t *testing.T) {
	cm := configMap("cfg", map[string]string{"a": "alpha", "b": "beta"})
	cm.BinaryData = map[string][]byte{"bin": {0, 1, 2}}
	f := newFixture(t, []runtime.Object{cm}, nil)
	pod := testPod("u1",
		v1.Volume{Name: "all", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, DefaultMode: ptr[int32](0o640)}}},
		v1.Volume{Name: "some", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "cfg"},
			Items:                []v1.KeyToPath{{Key: "a", Path: "x/y/a.txt", Mode: ptr[int32](0o600)}, {Key: "bin", Path: "bin"}}}}},
	)
	got := f.mountPod(pod)
	all := f.volDir("u1", PluginConfigMap, "all")
	if got["all"] != (Mounted{Path: all, ReadOnly: true, SELinuxRelabel: true}) {
		t.Errorf("all = %+v", got["all"])
	}
	for p, want := range map[string]string{"a": "alpha", "b": "beta", "bin": "\x00\x01\x02"} {
		if c := readFile(t, filepath.Join(all, p)); c != want {
			t.Errorf("all/%s = %q, want %q", p, c, want)
		}
		if m := fileMode0(t, filepath.Join(all, p)).Perm(); m != 0o640 {
			t.Errorf("all/%s mode %v, want defaultMode 0640", p, m)
		}
	}
	some := got["some"].Path
	if c := readFile(t, filepath.Join(some, "x/y/a.txt")); c != "alpha" {
		t.Errorf("some/x/y/a.txt = %q", c)
	}
	if m := fileMode0(t, filepath.Join(some, "x/y/a.txt")).Perm(); m != 0o600 {
		t.Errorf("item mode %v, want 0600", m)
	}
	if m := fileMode0(t, filepath.Join(some, "bin")).Perm(); m != 0o644 {
		t.Errorf("item without mode or defaultMode: %v, want the API default 0644", m)
	}
	if _, err := os.Lstat(filepath.Join(some, "b")); !os.IsNotExist(err) {
		t.Error("a key not in items was projected")
	}
	// On disk, as the kubelet: no tmpfs, the wrapped emptyDir's ready file.
	if f.mounted(all) {
		t.Error("a configMap volume was mounted as a tmpfs")
	}
	if _, err := os.Stat(filepath.Join(f.podDir("u1"), "plugins", "kubernetes.io~empty-dir", "wrapped_all", "ready")); err != nil {
		t.Errorf("no ready file of the wrapped emptyDir: %v", err)
	}
}

func TestSecretVolume(t *testing.T) {
	f := newFixture(t, []runtime.Object{secret("s", map[string]string{"user": "admin", "pass": "hunter2"})}, nil)
	pod := testPod("u1", v1.Volume{Name: "creds", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{
		SecretName: "s", DefaultMode: ptr[int32](0o400), Items: []v1.KeyToPath{{Key: "pass", Path: "password"}}}}})
	pod.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}
	got := f.mountPod(pod)
	dir := f.volDir("u1", PluginSecret, "creds")
	if got["creds"] != (Mounted{Path: dir, ReadOnly: true, SELinuxRelabel: true}) {
		t.Errorf("creds = %+v", got["creds"])
	}
	if !f.mounted(dir) {
		t.Fatal("a secret volume is not a tmpfs")
	}
	// The pod's memory limit is smaller than the node's allocatable memory.
	if opts := f.mountOpts(dir); strings.Join(opts, ",") != "size=67108864" {
		t.Errorf("tmpfs options %v, want size=67108864 (the pod's memory limit)", opts)
	}
	if c := readFile(t, filepath.Join(dir, "password")); c != "hunter2" {
		t.Errorf("password = %q", c)
	}
	if m := fileMode0(t, filepath.Join(dir, "password")).Perm(); m != 0o400 {
		t.Errorf("mode %v, want 0400", m)
	}
	if _, err := os.Lstat(filepath.Join(dir, "user")); !os.IsNotExist(err) {
		t.Error("a key not in items was projected")
	}
}

func TestTmpfsSize(t *testing.T) {
	alloc := v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}
	limited := func(mem string) v1.Container {
		return v1.Container{Name: mem, Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse(mem)}}}
	}
	pod := func(cs ...v1.Container) *v1.Pod { return &v1.Pod{Spec: v1.PodSpec{Containers: cs}} }
	gi := int64(1 << 30)
	for _, c := range []struct {
		name  string
		alloc v1.ResourceList
		pod   *v1.Pod
		limit *resource.Quantity
		want  int64
	}{
		{"node allocatable", alloc, pod(v1.Container{Name: "a"}), nil, gi},
		{"pod limit when all containers set one", alloc, pod(limited("100Mi"), limited("28Mi")), nil, 128 << 20},
		{"no pod limit when one container sets none", alloc, pod(limited("100Mi"), v1.Container{Name: "b"}), nil, gi},
		{"sizeLimit below the pod limit", alloc, pod(limited("100Mi")), ptr(resource.MustParse("10Mi")), 10 << 20},
		{"sizeLimit above the node's allocatable", alloc, pod(v1.Container{Name: "a"}), ptr(resource.MustParse("2Gi")), gi},
		{"nothing known", nil, pod(v1.Container{Name: "a"}), nil, 0},
		{"only sizeLimit known", nil, pod(v1.Container{Name: "a"}), ptr(resource.MustParse("1Mi")), 1 << 20},
	} {
		if got := memoryVolumeSize(c.alloc, c.pod, c.limit); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

func TestEmptyDirVolume(t *testing.T) {
	f := newFixture(t, nil, nil)
	pod := testPod("u1",
		v1.Volume{Name: "disk", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{SizeLimit: ptr(resource.MustParse("1Gi"))}}},
		v1.Volume{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory, SizeLimit: ptr(resource.MustParse("16Mi"))}}},
	)
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	got := f.mountPod(pod)
	disk := f.volDir("u1", PluginEmptyDir, "disk")
	mem := f.volDir("u1", PluginEmptyDir, "mem")
	if got["disk"] != (Mounted{Path: disk, SELinuxRelabel: true}) || got["mem"] != (Mounted{Path: mem, SELinuxRelabel: true}) {
		t.Errorf("mounted %+v", got)
	}
	if m := fileMode0(t, disk).Perm(); m != 0o777 {
		t.Errorf("emptyDir mode %v, want 0777 whatever the umask", m)
	}
	if f.mounted(disk) {
		t.Error("a disk emptyDir was mounted")
	}
	if !f.mounted(mem) || strings.Join(f.mountOpts(mem), ",") != "size=16777216" {
		t.Errorf("memory emptyDir: mounted %v with %v, want a tmpfs of its sizeLimit", f.mounted(mem), f.mountOpts(mem))
	}
	for _, name := range []string{"disk", "mem"} {
		if _, err := os.Stat(filepath.Join(f.podDir("u1"), "plugins", "kubernetes.io~empty-dir", name, "ready")); err != nil {
			t.Errorf("no ready file for %s: %v", name, err)
		}
	}
	// The size limits are there for the eviction manager.
	vols := f.m.PodVolumes("u1")
	if len(vols) != 2 || vols[0].Name != "disk" || vols[0].SizeLimit.String() != "1Gi" || vols[0].Memory ||
		vols[1].Name != "mem" || vols[1].SizeLimit.String() != "16Mi" || !vols[1].Memory {
		t.Errorf("PodVolumes = %+v", vols)
	}

	// Hugepages are not supported: loudly.
	hp := testPod("u2", v1.Volume{Name: "hp", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumHugePages}}})
	if _, err := f.m.MountPod(f.ctx, hp); err == nil || !strings.Contains(err.Error(), `MountVolume.SetUp failed for volume "hp" : unknown storage medium "HugePages"`) {
		t.Errorf("hugepages emptyDir: %v", err)
	}
}

func TestFSGroupOwnership(t *testing.T) {
	testenv.RequireRoot(t, "changing file ownership")
	f := newFixture(t, []runtime.Object{configMap("cfg", map[string]string{"k": "v"})}, nil)
	pod := testPod("u1",
		v1.Volume{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		v1.Volume{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, DefaultMode: ptr[int32](0o600)}}},
	)
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr[int64](4321)}
	got := f.mountPod(pod)
	gid := func(p string) uint32 {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Gid
	}
	scratch := got["scratch"].Path
	if g := gid(scratch); g != 4321 {
		t.Errorf("emptyDir group %d, want the fsGroup 4321", g)
	}
	if m := fileMode0(t, scratch); m&os.ModeSetgid == 0 || m.Perm() != 0o777 {
		t.Errorf("emptyDir mode %v, want setgid and 0777", m)
	}
	cfgFile := filepath.Join(got["cfg"].Path, "k")
	if g := gid(cfgFile); g != 4321 {
		t.Errorf("configMap file group %d, want 4321", g)
	}
	// Read-only volumes get group read, not write.
	if m := fileMode0(t, cfgFile).Perm(); m != 0o640 {
		t.Errorf("configMap file mode %v, want 0600|0440 = 0640", m)
	}
}

func TestDownwardAPIVolume(t *testing.T) {
	f := newFixture(t, nil, nil)
	pod := testPod("u1", v1.Volume{Name: "info", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{
		DefaultMode: ptr[int32](0o444),
		Items: []v1.DownwardAPIVolumeFile{
			{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}},
			{Path: "ns", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}},
			{Path: "uid", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.uid"}, Mode: ptr[int32](0o400)},
			{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			{Path: "tier", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels['tier']"}},
			{Path: "annotations", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.annotations"}},
			{Path: "res/cpu_limit", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "app", Resource: "limits.cpu", Divisor: resource.MustParse("1m")}},
			{Path: "res/mem_limit", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "app", Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}},
			{Path: "res/mem_request", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "app", Resource: "requests.memory"}},
		},
	}}})
	pod.Labels = map[string]string{"tier": "web", "app": "shop"}
	pod.Annotations = map[string]string{"note": "line1\nline2 \"q\""}
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Limits:   v1.ResourceList{v1.ResourceMemory: resource.MustParse("100Mi")},
		Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("50Mi")},
	}
	got := f.mountPod(pod)
	dir := got["info"].Path
	if got["info"] != (Mounted{Path: f.volDir("u1", PluginDownwardAPI, "info"), ReadOnly: true, SELinuxRelabel: true}) || !f.mounted(dir) {
		t.Errorf("info = %+v, tmpfs %v", got["info"], f.mounted(dir))
	}
	for p, want := range map[string]string{
		"name":        "web",
		"ns":          "ns",
		"uid":         "u1",
		"labels":      "app=\"shop\"\ntier=\"web\"",
		"tier":        "web",
		"annotations": `note="line1\nline2 \"q\""`,
		// No cpu limit: the node's allocatable (4 cpus) in millicores.
		"res/cpu_limit":   "4000",
		"res/mem_limit":   "100",
		"res/mem_request": "52428800",
	} {
		if c := readFile(t, filepath.Join(dir, p)); c != want {
			t.Errorf("%s = %q, want %q", p, c, want)
		}
	}
	if m := fileMode0(t, filepath.Join(dir, "uid")).Perm(); m != 0o400 {
		t.Errorf("uid mode %v, want 0400", m)
	}
	if m := fileMode0(t, filepath.Join(dir, "name")).Perm(); m != 0o444 {
		t.Errorf("name mode %v, want 0444", m)
	}

	// A label change is written in place by the reconciler.
	f.run()
	before := dataTarget(t, dir)
	updated := pod.DeepCopy()
	updated.ResourceVersion = "2"
	updated.Labels["tier"] = "db"
	f.mountPod(updated)
	f.eventually("the label change to be written", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "tier"))
		return string(b) == "db"
	})
	if dataTarget(t, dir) == before {
		t.Error("the update did not go through a new data directory")
	}
}

func TestDownwardAPIErrors(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}}
	for _, c := range []struct {
		item v1.DownwardAPIVolumeFile
		want string
	}{
		{v1.DownwardAPIVolumeFile{Path: "x", FieldRef: &v1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}, "unsupported fieldPath: spec.nodeName"},
		{v1.DownwardAPIVolumeFile{Path: "x", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name['x']"}}, `fieldPath "metadata.name['x']" does not support subscript`},
		{v1.DownwardAPIVolumeFile{Path: "x", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "nope", Resource: "limits.cpu"}}, "container nope not found"},
		{v1.DownwardAPIVolumeFile{Path: "x", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "c", Resource: "limits.gpu"}}, "unsupported container resource : limits.gpu"},
	} {
		_, err := downwardAPIPayload([]v1.DownwardAPIVolumeFile{c.item}, pod, nil, 0o644)
		if err == nil || err.Error() != c.want {
			t.Errorf("%+v: error %v, want %q", c.item, err, c.want)
		}
	}
}

// tokenReactor answers TokenRequests with tokens valid from the fake
// clock's now, numbered, and records the requests.
type tokenReactor struct {
	f        *fixture
	mu       sync.Mutex
	requests []*authenticationv1.TokenRequest
	names    []string
}

func (r *tokenReactor) install() {
	r.f.client.PrependReactor("create", "serviceaccounts", func(a clienttesting.Action) (bool, runtime.Object, error) {
		ca, ok := a.(clienttesting.CreateAction)
		if !ok || a.GetSubresource() != "token" {
			return false, nil, nil
		}
		tr := ca.GetObject().(*authenticationv1.TokenRequest).DeepCopy()
		r.mu.Lock()
		r.requests = append(r.requests, tr.DeepCopy())
		r.names = append(r.names, ca.(clienttesting.CreateActionImpl).Name)
		n := len(r.requests)
		r.mu.Unlock()
		tr.Status.Token = "token-" + strconv.Itoa(n)
		tr.Status.ExpirationTimestamp = metav1.NewTime(r.f.clock.Now().Add(time.Duration(*tr.Spec.ExpirationSeconds) * time.Second))
		return true, tr, nil
	})
}

func (r *tokenReactor) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.requests)
}

func TestProjectedVolume(t *testing.T) {
	f := newFixture(t, []runtime.Object{
		configMap("cfg", map[string]string{"ca.crt": "CA", "other": "x"}),
		secret("s", map[string]string{"key": "K"}),
	}, nil)
	tokens := &tokenReactor{f: f}
	tokens.install()
	pod := testPod("u1", v1.Volume{Name: "kube-api-access", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		DefaultMode: ptr[int32](0o644),
		Sources: []v1.VolumeProjection{
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token", Audience: "vault", ExpirationSeconds: ptr[int64](7200)}},
			{ConfigMap: &v1.ConfigMapProjection{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Items: []v1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{Secret: &v1.SecretProjection{LocalObjectReference: v1.LocalObjectReference{Name: "s"}}},
			{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		},
	}}})
	got := f.mountPod(pod)
	dir := got["kube-api-access"].Path
	if !f.mounted(dir) || !got["kube-api-access"].ReadOnly {
		t.Errorf("projected volume %+v, tmpfs %v", got["kube-api-access"], f.mounted(dir))
	}
	for p, want := range map[string]string{"token": "token-1", "ca.crt": "CA", "key": "K", "namespace": "ns"} {
		if c := readFile(t, filepath.Join(dir, p)); c != want {
			t.Errorf("%s = %q, want %q", p, c, want)
		}
	}
	if m := fileMode0(t, filepath.Join(dir, "token")).Perm(); m != 0o644 {
		t.Errorf("token mode %v, want defaultMode 0644 without fsGroup", m)
	}
	if len(tokens.requests) != 1 {
		t.Fatalf("%d token requests, want 1", len(tokens.requests))
	}
	tr := tokens.requests[0]
	ref := tr.Spec.BoundObjectRef
	if tokens.names[0] != "sa" || strings.Join(tr.Spec.Audiences, ",") != "vault" || *tr.Spec.ExpirationSeconds != 7200 ||
		ref == nil || ref.Kind != "Pod" || ref.APIVersion != "v1" || ref.Name != "web" || ref.UID != "u1" {
		t.Errorf("token request for %s: %+v", tokens.names[0], tr.Spec)
	}

	// With an fsGroup the token is private to its owner and group.
	pod2 := testPod("u2", pod.Spec.Volumes[0])
	pod2.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr[int64](2000)}
	got2 := f.mountPod(pod2)
	if m := fileMode0(t, filepath.Join(got2["kube-api-access"].Path, "token")).Perm(); m != 0o640 {
		t.Errorf("token mode with fsGroup %v, want 0600 plus group read from the ownership change", m)
	}
}

func TestProjectedUnsupportedSources(t *testing.T) {
	f := newFixture(t, nil, nil)
	pod := testPod("u1", v1.Volume{Name: "p", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		Sources: []v1.VolumeProjection{{ClusterTrustBundle: &v1.ClusterTrustBundleProjection{Name: ptr("b"), Path: "b.pem"}}},
	}}})
	_, err := f.m.MountPod(f.ctx, pod)
	if err == nil || !strings.Contains(err.Error(), `MountVolume.SetUp failed for volume "p" : clusterTrustBundle projection of volume "p" is not supported by this node agent`) {
		t.Errorf("error %v", err)
	}
}
