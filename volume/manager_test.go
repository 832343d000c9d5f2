package volume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/mount-utils"
)

func cmVolume(name, cm string, optional *bool) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: cm}, Optional: optional}}}
}

func TestConfigMapUpdatedInPlace(t *testing.T) {
	f := newFixture(t, []runtime.Object{configMap("cfg", map[string]string{"k": "v1", "gone": "x"})}, nil)
	f.run()
	pod := testPod("u1", cmVolume("c", "cfg", nil))
	got := f.mountPod(pod)
	dir := got["c"].Path
	if readFile(t, filepath.Join(dir, "k")) != "v1" {
		t.Fatal("initial content missing")
	}
	f.eventually("the configMap watch", func() bool { return f.m.objects.watched() == 1 })
	first := dataTarget(t, dir)

	_, err := f.client.CoreV1().ConfigMaps("ns").Update(f.ctx, configMap("cfg", map[string]string{"k": "v2", "new": "n"}), metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.eventually("the new content", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "k"))
		n, _ := os.ReadFile(filepath.Join(dir, "new"))
		return string(b) == "v2" && string(n) == "n"
	})
	if _, err := os.Lstat(filepath.Join(dir, "gone")); !os.IsNotExist(err) {
		t.Error("a removed key is still visible")
	}
	if second := dataTarget(t, dir); second == first {
		t.Error("..data was not swapped")
	} else {
		// The writer removes the old data directory after the swap
		// that made the new content visible.
		f.eventually("the old data directory removed", func() bool {
			_, err := os.Stat(filepath.Join(dir, first))
			return os.IsNotExist(err)
		})
	}
	// The update came from the watch: no GET of the configMap.
	for _, a := range f.client.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "configmaps" {
			t.Errorf("a GET of the configMap: %v", a)
		}
	}
	// Nothing the runtime mounts changed.
	again := f.mountPod(pod)
	if again["c"] != got["c"] {
		t.Errorf("MountPod returned %+v after the update, %+v before", again["c"], got["c"])
	}
}

func TestMountPodIsCheapWhenNothingChanged(t *testing.T) {
	f := newFixture(t, []runtime.Object{configMap("cfg", map[string]string{"k": "v"}), secret("s", map[string]string{"k": "v"})}, nil)
	pod := testPod("u1",
		cmVolume("c", "cfg", nil),
		v1.Volume{Name: "s", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s"}}},
		v1.Volume{Name: "e", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
	)
	first := f.mountPod(pod)
	actions := len(f.client.Actions())
	mounts := len(f.mounter.GetLog())
	for range 3 {
		again := f.mountPod(pod.DeepCopy())
		for k, v := range first {
			if again[k] != v {
				t.Errorf("volume %s: %+v, first %+v", k, again[k], v)
			}
		}
	}
	if n := len(f.client.Actions()); n != actions {
		t.Errorf("repeated MountPod made %d API calls", n-actions)
	}
	if n := len(f.mounter.GetLog()); n != mounts {
		t.Errorf("repeated MountPod made %d mount calls", n-mounts)
	}
}

// mountOps counts the volume_mount operations reg has recorded.
func mountOps(t *testing.T, reg *prometheus.Registry) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() != "storage_operation_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "operation_name" && l.GetValue() == opMount {
					n += m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return n
}

func TestTokenRefresh(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := newFixture(t, nil, func(o *Options) { o.Registerer = reg })
	tokens := &tokenReactor{f: f}
	tokens.install()
	f.run()
	pod := testPod("u1", v1.Volume{Name: "t", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
		Sources: []v1.VolumeProjection{{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "token"}}},
	}}})
	got := f.mountPod(pod)
	file := filepath.Join(got["t"].Path, "token")
	if readFile(t, file) != "token-1" || tokens.count() != 1 {
		t.Fatalf("token %q after %d requests", readFile(t, file), tokens.count())
	}
	if exp := *tokens.requests[0].Spec.ExpirationSeconds; exp != 3600 {
		t.Errorf("expirationSeconds %d, want the API default 3600", exp)
	}
	// resync advances the clock by one resync period and waits until the
	// reconciler set the volume up again.
	resync := func() {
		t.Helper()
		f.eventually("the reconciler to wait", f.clock.HasWaiters)
		before := mountOps(t, reg)
		f.clock.Step(DefaultResyncPeriod)
		f.eventually("a resync", func() bool { return mountOps(t, reg) > before })
	}
	// 47 minutes: less than 80 % of an hour, jitter included.
	for range 47 {
		resync()
	}
	if n := tokens.count(); n != 1 {
		t.Fatalf("%d token requests before 80 %% of the token's life", n)
	}
	// 49 minutes: past 80 %.
	resync()
	resync()
	f.eventually("the refreshed token", func() bool {
		b, _ := os.ReadFile(file)
		return string(b) == "token-2"
	})
	if n := tokens.count(); n != 2 {
		t.Errorf("%d token requests, want 2", n)
	}
	// The tokens of a pod go with it.
	if err := f.m.UnmountPod(f.ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	f.m.tokens.mu.RLock()
	left := len(f.m.tokens.cache)
	f.m.tokens.mu.RUnlock()
	if left != 0 {
		t.Errorf("%d tokens cached after the pod was unmounted", left)
	}
}

func TestTokenMaxTTL(t *testing.T) {
	f := newFixture(t, nil, nil)
	tokens := &tokenReactor{f: f}
	tokens.install()
	tr := func() *authenticationv1.TokenRequest {
		return &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr[int64](48 * 3600)}}
	}
	if _, err := f.m.tokens.get(f.ctx, "ns", "sa", tr()); err != nil {
		t.Fatal(err)
	}
	f.clock.Step(23 * time.Hour)
	f.m.tokens.get(f.ctx, "ns", "sa", tr())
	if tokens.count() != 1 {
		t.Fatal("a 48h token was refreshed before 24h")
	}
	f.clock.Step(time.Hour + time.Second)
	f.m.tokens.get(f.ctx, "ns", "sa", tr())
	if tokens.count() != 2 {
		t.Error("a 48h token was not refreshed after 24h")
	}
}

func TestOptionalAndMissingObjects(t *testing.T) {
	f := newFixture(t, []runtime.Object{configMap("partial", map[string]string{"a": "1"})}, nil)
	f.run()

	// Optional and missing: an empty volume.
	opt := testPod("u1", cmVolume("c", "absent", ptr(true)),
		v1.Volume{Name: "s", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "absent", Optional: ptr(true)}}})
	got := f.mountPod(opt)
	entries, _ := os.ReadDir(got["c"].Path)
	if len(entries) != 2 { // ..data and the timestamped directory
		t.Errorf("optional missing configMap: %d entries", len(entries))
	}
	// Optional key missing: skipped.
	optKey := testPod("u2", v1.Volume{Name: "c", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "partial"}, Optional: ptr(true),
		Items: []v1.KeyToPath{{Key: "a", Path: "a"}, {Key: "b", Path: "b"}}}}})
	got = f.mountPod(optKey)
	if readFile(t, filepath.Join(got["c"].Path, "a")) != "1" {
		t.Error("optional items: present key missing")
	}
	// Missing key, not optional.
	badKey := testPod("u3", v1.Volume{Name: "c", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "partial"}, Items: []v1.KeyToPath{{Key: "b", Path: "b"}}}}})
	if _, err := f.m.MountPod(f.ctx, badKey); err == nil || !strings.HasSuffix(err.Error(), `MountVolume.SetUp failed for volume "c" : configmap references non-existent config key: b`) {
		t.Errorf("missing key: %v", err)
	}

	// Missing and not optional: an error and an event until it appears.
	pod := testPod("u4", cmVolume("c", "later", nil),
		v1.Volume{Name: "s", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "later"}}})
	f.events()
	_, err := f.m.MountPod(f.ctx, pod)
	want := `unmounted volumes=[c s], unattached volumes=[], failed to process volumes=[]: ` +
		`MountVolume.SetUp failed for volume "c" : configmap "later" not found; MountVolume.SetUp failed for volume "s" : secret "later" not found`
	if err == nil || err.Error() != want {
		t.Fatalf("error\n %v\nwant\n %s", err, want)
	}
	// The error says when the volumes are tried again, for the caller to
	// sync the pod then.
	var mountErr *MountError
	if !errors.As(err, &mountErr) || !mountErr.RetryAt().Equal(f.clock.Now().Add(initialRetryDelay)) {
		t.Errorf("error %#v, want a *MountError retrying in %v", err, initialRetryDelay)
	}
	events := f.events()
	for _, e := range []string{
		`Warning FailedMount MountVolume.SetUp failed for volume "c" : configmap "later" not found`,
		`Warning FailedMount MountVolume.SetUp failed for volume "s" : secret "later" not found`,
	} {
		if !hasEvent(events, e) {
			t.Errorf("no event %q in %q", e, events)
		}
	}
	// Within the back-off the last error is returned without a retry.
	gets := f.apiCalls("get")
	if _, err := f.m.MountPod(f.ctx, pod); err == nil || err.Error() != want {
		t.Errorf("retry within back-off: %v", err)
	}
	if f.apiCalls("get") != gets || len(f.events()) != 0 {
		t.Error("a retry within the back-off went to the API or recorded an event")
	}
	// The objects appear: the watch lifts the back-off.
	f.client.CoreV1().ConfigMaps("ns").Create(f.ctx, configMap("later", map[string]string{"k": "v"}), metav1.CreateOptions{})
	f.client.CoreV1().Secrets("ns").Create(f.ctx, secret("later", map[string]string{"k": "v"}), metav1.CreateOptions{})
	f.eventually("the volumes to mount", func() bool {
		_, err := f.m.MountPod(f.ctx, pod)
		return err == nil
	})
}

// TestObjectChangeLiftsOnlyItsVolumesBackOff: a configMap that appears
// lifts the back-off of the volume it feeds, not that of the pod's other
// volumes, whose object is still missing: those are not tried again (no
// new event) before their own back-off ends.
func TestObjectChangeLiftsOnlyItsVolumesBackOff(t *testing.T) {
	f := newFixture(t, nil, nil)
	f.run()
	pod := testPod("u1", cmVolume("c", "later", nil),
		v1.Volume{Name: "s", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "later"}}})
	if _, err := f.m.MountPod(f.ctx, pod); err == nil {
		t.Fatal("mounted with both objects missing")
	}
	f.events()
	f.client.CoreV1().ConfigMaps("ns").Create(f.ctx, configMap("later", map[string]string{"k": "v"}), metav1.CreateOptions{})
	want := `unmounted volumes=[s], unattached volumes=[], failed to process volumes=[]: ` +
		`MountVolume.SetUp failed for volume "s" : secret "later" not found`
	f.eventually("the configMap volume to mount", func() bool {
		_, err := f.m.MountPod(f.ctx, pod)
		return err != nil && err.Error() == want
	})
	if events := f.events(); len(events) != 0 {
		t.Errorf("the secret volume was tried again within its back-off: events %q", events)
	}
}

func TestUnsupportedVolumes(t *testing.T) {
	f := newFixture(t, nil, nil)
	pod := testPod("u1",
		v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{FC: &v1.FCVolumeSource{}}},
		v1.Volume{Name: "csi", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "x.example.com"}}},
		v1.Volume{Name: "nfs", VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: "s", Path: "/"}}},
		v1.Volume{Name: "iscsi", VolumeSource: v1.VolumeSource{ISCSI: &v1.ISCSIVolumeSource{TargetPortal: "t", IQN: "i"}}},
		v1.Volume{Name: "ok", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
	)
	// A volume no container uses is ignored, as by the kubelet.
	pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: "unused", VolumeSource: v1.VolumeSource{NFS: &v1.NFSVolumeSource{Server: "s", Path: "/"}}})
	got, err := f.m.MountPod(f.ctx, pod)
	want := `unmounted volumes=[csi data iscsi nfs], unattached volumes=[], failed to process volumes=[csi data iscsi nfs]: ` +
		`failed to get Plugin from volumeSpec for volume "data" err=no volume plugin matched: fc volumes are not supported by this node agent; ` +
		`failed to get Plugin from volumeSpec for volume "csi" err=no volume plugin matched: csi volumes are not supported by this node agent; ` +
		`failed to get Plugin from volumeSpec for volume "nfs" err=no volume plugin matched: nfs volumes are not supported by this node agent; ` +
		`failed to get Plugin from volumeSpec for volume "iscsi" err=no volume plugin matched: iscsi volumes are not supported by this node agent`
	if got != nil || err == nil || err.Error() != want {
		t.Fatalf("MountPod = %v,\n %v\nwant\n %s", got, err, want)
	}
	var mountErr *MountError
	if !errors.As(err, &mountErr) || !mountErr.RetryAt().IsZero() {
		t.Errorf("error %#v, want a *MountError without a retry time (no plugin will ever mount these)", err)
	}
	events := f.events()
	if len(events) != 1 || events[0] != "Warning FailedMount Unable to attach or mount volumes: "+want {
		t.Errorf("events %q", events)
	}
	// The summary is not repeated on every sync...
	f.m.MountPod(f.ctx, pod)
	if e := f.events(); len(e) != 0 {
		t.Errorf("summary event repeated at once: %q", e)
	}
	// ...but after the kubelet's 2m3s.
	f.clock.Step(podAttachAndMountTimeout)
	f.m.MountPod(f.ctx, pod)
	if e := f.events(); len(e) != 1 || !strings.HasPrefix(e[0], "Warning FailedMount Unable to attach or mount volumes: unmounted volumes=[csi data iscsi nfs]") {
		t.Errorf("events after 2m3s %q", e)
	}
}

func TestSummaryEventAfterTimeout(t *testing.T) {
	f := newFixture(t, nil, nil)
	pod := testPod("u1", cmVolume("c", "missing", nil))
	f.m.MountPod(f.ctx, pod)
	if e := f.events(); len(e) != 1 || !strings.Contains(e[0], "MountVolume.SetUp failed") {
		t.Fatalf("first failure: events %q", e)
	}
	f.clock.Step(time.Minute)
	f.m.MountPod(f.ctx, pod)
	if e := f.events(); hasEvent(e, "Unable to attach") {
		t.Errorf("summary before 2m3s: %q", e)
	}
	f.clock.Step(podAttachAndMountTimeout - time.Minute)
	f.m.MountPod(f.ctx, pod)
	if e := f.events(); !hasEvent(e, `Warning FailedMount Unable to attach or mount volumes: unmounted volumes=[c], unattached volumes=[], failed to process volumes=[]: MountVolume.SetUp failed for volume "c" : configmap "missing" not found`) {
		t.Errorf("no summary after 2m3s: %q", e)
	}
}

func TestUnmountPod(t *testing.T) {
	f := newFixture(t, []runtime.Object{configMap("cfg", map[string]string{"k": "v"}), secret("s", map[string]string{"k": "v"})}, nil)
	f.run()
	pod := testPod("u1",
		cmVolume("c", "cfg", nil),
		v1.Volume{Name: "s", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s"}}},
		v1.Volume{Name: "disk", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		v1.Volume{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
		v1.Volume{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: t.TempDir()}}},
	)
	pod.Spec.Containers[0].Env = []v1.EnvVar{{Name: "X", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: "env-cm"}, Key: "k"}}}}
	got := f.mountPod(pod)
	os.WriteFile(filepath.Join(got["disk"].Path, "scratch"), []byte("x"), 0o644)
	// The runtime's files in the pod directory stay.
	os.WriteFile(filepath.Join(f.podDir("u1"), "etc-hosts"), []byte("127.0.0.1 localhost\n"), 0o644)
	f.eventually("the watches", func() bool { return f.m.objects.watched() == 3 })
	if err := f.m.UnmountPod(f.ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"s", "mem"} {
		if f.mounted(got[name].Path) {
			t.Errorf("%s still mounted", name)
		}
	}
	for _, d := range []string{"volumes", "plugins", "volume-subpaths"} {
		if _, err := os.Stat(filepath.Join(f.podDir("u1"), d)); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", d, err)
		}
	}
	if _, err := os.Stat(got["host"].Path); err != nil {
		t.Errorf("the hostPath was touched: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.podDir("u1"), "etc-hosts")); err != nil {
		t.Errorf("the runtime's file was removed: %v", err)
	}
	if n := f.m.objects.watched(); n != 0 {
		t.Errorf("%d watches left", n)
	}
	if err := f.m.UnmountPod(f.ctx, "u1"); err != nil {
		t.Errorf("second UnmountPod: %v", err)
	}
	if vols := f.m.PodVolumes("u1"); len(vols) != 0 {
		t.Errorf("volumes left %+v", vols)
	}
}

// orphanDisk lays out volumes of a pod the Manager never saw.
func orphanDisk(t *testing.T, f *fixture, uid types.UID) (emptyDir, secretDir, csiDir string) {
	t.Helper()
	emptyDir = f.volDir(uid, PluginEmptyDir, "data")
	secretDir = f.volDir(uid, PluginSecret, "creds")
	csiDir = filepath.Join(f.podDir(uid), "volumes", "kubernetes.io~csi", "pvc-1", "mount")
	for _, d := range []string{emptyDir, secretDir, csiDir, filepath.Join(f.podDir(uid), "containers", "app")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(emptyDir, "file"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(secretDir, "key"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(csiDir, "precious"), []byte("x"), 0o644)
	os.WriteFile(filepath.Join(f.podDir(uid), "etc-hosts"), nil, 0o644)
	return emptyDir, secretDir, csiDir
}

func TestOrphanCleanup(t *testing.T) {
	known := map[types.UID]bool{"known": true}
	var ready atomic.Bool
	var readyCalls atomic.Int64
	f := newFixture(t, nil, func(o *Options) {
		o.PodKnown = func(uid types.UID) bool { return known[uid] }
		o.SourcesReady = func() bool { readyCalls.Add(1); return ready.Load() }
	})
	// A plain orphan: its secret tmpfs is mounted.
	plainED, plainSecret, _ := orphanDisk(t, f, "plain")
	os.RemoveAll(filepath.Join(f.podDir("plain"), "volumes", "kubernetes.io~csi"))
	f.mounter.MountPoints = append(f.mounter.MountPoints, mount.MountPoint{Device: "tmpfs", Path: plainSecret, Type: "tmpfs"})
	// An orphan with a volume of a plugin this agent does not have, still
	// mounted, and a mount point inside its emptyDir.
	_, _, csiDir := orphanDisk(t, f, "foreign")
	nestedED, _, _ := orphanDisk(t, f, "nested")
	os.RemoveAll(filepath.Join(f.podDir("nested"), "volumes", "kubernetes.io~csi"))
	nested := filepath.Join(nestedED, "sub")
	os.MkdirAll(nested, 0o755)
	os.WriteFile(filepath.Join(nested, "data"), []byte("x"), 0o644)
	f.mounter.MountPoints = append(f.mounter.MountPoints,
		mount.MountPoint{Device: "/dev/sdb", Path: filepath.Dir(csiDir), Type: "ext4"},
		mount.MountPoint{Device: "/dev/sdc", Path: nested, Type: "ext4"})
	// A pod the loop knows, and one this Manager mounted.
	knownED, _, _ := orphanDisk(t, f, "known")
	f.run()
	mountedPod := testPod("mine", v1.Volume{Name: "d", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}})
	got := f.mountPod(mountedPod)

	// Not before the sources are ready.
	f.eventually("the reconciler to wait", f.clock.HasWaiters)
	calls := readyCalls.Load()
	f.clock.Step(DefaultCleanupPeriod)
	f.eventually("a cleanup pass", func() bool { return readyCalls.Load() > calls })
	if _, err := os.Stat(plainED); err != nil {
		t.Fatal("orphan cleaned up before the sources were ready")
	}
	ready.Store(true)
	f.eventually("the plain orphan to go", func() bool {
		f.eventually("the reconciler to wait", f.clock.HasWaiters)
		f.clock.Step(DefaultCleanupPeriod)
		_, err := os.Stat(f.podDir("plain"))
		return os.IsNotExist(err)
	})
	if f.mounted(plainSecret) {
		t.Error("the orphan's tmpfs is still mounted")
	}
	// Never through a mount point.
	if readFile(t, filepath.Join(csiDir, "precious")) != "x" {
		t.Error("a mounted volume of an unknown plugin lost its content")
	}
	if readFile(t, filepath.Join(nested, "data")) != "x" {
		t.Error("the content of a mount point inside an emptyDir was deleted")
	}
	// The pods the agent knows or mounts are left alone.
	if _, err := os.Stat(filepath.Join(knownED, "file")); err != nil {
		t.Errorf("the known pod's volume was touched: %v", err)
	}
	if _, err := os.Stat(got["d"].Path); err != nil {
		t.Errorf("the mounted pod's volume was touched: %v", err)
	}
	// Once the foreign volume is unmounted, only its empty directories go.
	os.Remove(filepath.Join(csiDir, "precious"))
	f.mounter.Unmount(filepath.Dir(csiDir))
	f.eventually("the foreign orphan to go", func() bool {
		f.eventually("the reconciler to wait", f.clock.HasWaiters)
		f.clock.Step(DefaultCleanupPeriod)
		_, err := os.Stat(f.podDir("foreign"))
		return os.IsNotExist(err)
	})
}

// TestCleanupSettles: once every pod directory is one the Manager mounts,
// the disk is not read every CleanupPeriod; forgetting a pod brings the
// next look within CleanupPeriod, and its directory goes.
func TestCleanupSettles(t *testing.T) {
	var known atomic.Bool
	known.Store(true)
	var passes atomic.Int64
	f := newFixture(t, nil, func(o *Options) {
		o.PodKnown = func(types.UID) bool { return known.Load() }
		o.SourcesReady = func() bool { passes.Add(1); return true }
	})
	f.run()
	f.mountPod(testPod("mine", v1.Volume{Name: "d", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}))
	f.eventually("the reconciler to wait", f.clock.HasWaiters)
	before := passes.Load()
	for range 5 {
		f.clock.Step(DefaultCleanupPeriod)
		time.Sleep(2 * time.Millisecond)
	}
	if n := passes.Load() - before; n != 0 {
		t.Errorf("%d cleanup passes over 5 cleanup periods with every pod directory mounted, want 0", n)
	}
	known.Store(false)
	if err := f.m.UnmountPod(f.ctx, "mine"); err != nil {
		t.Fatal(err)
	}
	f.eventually("the forgotten pod's directory to go", func() bool {
		f.clock.Step(DefaultCleanupPeriod)
		_, err := os.Stat(f.podDir("mine"))
		return os.IsNotExist(err)
	})
	if n := passes.Load() - before; n > 2 {
		t.Errorf("%d cleanup passes to remove one directory, want at most 2", n)
	}
}

func TestOrphansNeedPodKnown(t *testing.T) {
	f := newFixture(t, nil, nil)
	ed, _, _ := orphanDisk(t, f, "orphan")
	f.run()
	// The first pass runs before Run waits on its timers.
	f.eventually("the reconciler to wait", f.clock.HasWaiters)
	if _, err := os.Stat(filepath.Join(ed, "file")); err != nil {
		t.Errorf("without PodKnown an orphan was cleaned up: %v", err)
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	f := newFixture(t, []runtime.Object{configMap("cfg", map[string]string{"k": "v"})}, func(o *Options) { o.Registerer = reg })
	pod := testPod("u1", cmVolume("c", "cfg", nil), cmVolume("bad", "missing", nil),
		v1.Volume{Name: "data", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "x"}}})
	f.m.MountPod(f.ctx, pod)
	want := `
# HELP volume_manager_total_volumes Number of volumes in Volume Manager
# TYPE volume_manager_total_volumes gauge
volume_manager_total_volumes{plugin_name="N/A",state="desired_state_of_world"} 1
volume_manager_total_volumes{plugin_name="kubernetes.io/configmap",state="actual_state_of_world"} 1
volume_manager_total_volumes{plugin_name="kubernetes.io/configmap",state="desired_state_of_world"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "volume_manager_total_volumes"); err != nil {
		t.Error(err)
	}
	mfs, _ := reg.Gather()
	counts := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "storage_operation_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				key += l.GetName() + "=" + l.GetValue() + " "
			}
			counts[key] = m.GetHistogram().GetSampleCount()
		}
	}
	if counts["migrated=false operation_name=volume_mount status=success volume_plugin=kubernetes.io/configmap "] != 1 ||
		counts["migrated=false operation_name=volume_mount status=fail-unknown volume_plugin=kubernetes.io/configmap "] != 1 {
		t.Errorf("storage_operation_duration_seconds counts %v", counts)
	}
	// A second Manager on the same registry fails loudly on the collector.
	if _, err := New(Options{RootDir: t.TempDir(), Registerer: reg}); err == nil {
		t.Error("two Managers registered volume_manager_total_volumes on one registry")
	}
}

func TestVolumesInUse(t *testing.T) {
	f := newFixture(t, nil, func(o *Options) { o.Plugins = []Plugin{attachable{}} })
	if f.m.ReconcilerSynced() {
		t.Error("synced before Run")
	}
	pod := testPod("u1",
		v1.Volume{Name: "e", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		v1.Volume{Name: "disk", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: "disk.example.com", VolumeAttributes: map[string]string{"id": "d-1"}}}},
	)
	f.mountPod(pod)
	got := f.m.VolumesInUse()
	if len(got) != 1 || got[0] != "disk.example.com^d-1" {
		t.Errorf("VolumesInUse = %v, want only the attachable volume", got)
	}
	f.run()
	if !f.m.ReconcilerSynced() {
		t.Error("not synced after Run started")
	}
}

// TestUnattachedVolume: a volume waiting for its attachment is reported in
// use before it is mounted, listed among the unattached volumes, retried
// with the back-off and given no FailedMount event per try, only the pod's
// summary after 2m3s; once attached it mounts.
func TestUnattachedVolume(t *testing.T) {
	p := &waitsForAttach{}
	f := newFixture(t, nil, func(o *Options) { o.Plugins = []Plugin{p} })
	pod := testPod("u1", v1.Volume{Name: "disk", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{
		Driver: "disk.example.com", VolumeAttributes: map[string]string{"id": "d-1"}}}})
	_, err := f.m.MountPod(f.ctx, pod)
	const want = `unmounted volumes=[disk], unattached volumes=[disk], failed to process volumes=[]: not attached yet`
	if err == nil || err.Error() != want {
		t.Fatalf("MountPod: %v, want %s", err, want)
	}
	if got := f.m.VolumesInUse(); !slices.Equal(got, []v1.UniqueVolumeName{"disk.example.com^d-1"}) {
		t.Errorf("VolumesInUse while unattached = %v", got)
	}
	// Within the back-off: not tried again, still listed as unattached.
	if _, err := f.m.MountPod(f.ctx, pod); err == nil || err.Error() != want || p.tries != 1 {
		t.Errorf("MountPod within the back-off: %v after %d tries", err, p.tries)
	}
	if e := f.events(); len(e) != 0 {
		t.Errorf("events while unattached %q, want none", e)
	}
	f.clock.Step(podAttachAndMountTimeout)
	if _, err := f.m.MountPod(f.ctx, pod); err == nil || p.tries != 2 {
		t.Fatalf("MountPod after the timeout: %v after %d tries", err, p.tries)
	}
	if e := f.events(); len(e) != 1 || e[0] != "Warning FailedMount Unable to attach or mount volumes: "+want {
		t.Errorf("events after 2m3s %q, want the summary", e)
	}
	p.attached = true
	f.clock.Step(maxRetryDelay)
	if _, err := f.m.MountPod(f.ctx, pod); err != nil {
		t.Fatalf("MountPod once attached: %v", err)
	}
}

// waitsForAttach is an attachable plugin whose SetUp fails with an
// UnattachedError until attached is set.
type waitsForAttach struct {
	attachable
	attached bool
	tries    int
}

func (p *waitsForAttach) SetUp(ctx context.Context, vc *VolumeContext) (Mounted, error) {
	p.tries++
	if !p.attached {
		return Mounted{}, &UnattachedError{Message: "not attached yet"}
	}
	return p.attachable.SetUp(ctx, vc)
}

// attachable is a plugin whose volumes are reported in use.
type attachable struct{}

func (attachable) Name() string { return "example.com/disk" }
func (attachable) CanSupport(vol *v1.Volume) bool {
	return vol.CSI != nil && vol.CSI.Driver == "disk.example.com"
}
func (attachable) SetUp(_ context.Context, vc *VolumeContext) (Mounted, error) {
	return Mounted{Path: vc.Path}, os.MkdirAll(vc.Path, 0o750)
}
func (attachable) TearDown(_ context.Context, vc *VolumeContext) error { return os.RemoveAll(vc.Path) }
func (attachable) VolumeInUseName(vc *VolumeContext) (v1.UniqueVolumeName, bool) {
	return v1.UniqueVolumeName(vc.Volume.CSI.Driver + "^" + vc.Volume.CSI.VolumeAttributes["id"]), true
}

func TestPluginSelection(t *testing.T) {
	if _, err := New(Options{RootDir: "/x", Plugins: []Plugin{attachable{}, attachable{}}}); err == nil {
		t.Error("two plugins of one name accepted")
	}
	// Two plugins claiming one volume: an error naming both.
	f := newFixture(t, nil, func(o *Options) { o.Plugins = []Plugin{greedy{}} })
	_, err := f.m.MountPod(f.ctx, testPod("u1", v1.Volume{Name: "e", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}))
	if err == nil || !strings.HasSuffix(err.Error(), `failed to get Plugin from volumeSpec for volume "e" err=multiple volume plugins matched: kubernetes.io/empty-dir,example.com/greedy`) {
		t.Errorf("error %v", err)
	}
	// A plugin with a built-in's name replaces it.
	f = newFixture(t, nil, func(o *Options) { o.Plugins = []Plugin{replacement{}} })
	got := f.mountPod(testPod("u1", v1.Volume{Name: "e", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}))
	if got["e"].Path != "/replaced" {
		t.Errorf("replacement not used: %+v", got)
	}
}

type greedy struct{ attachable }

func (greedy) Name() string               { return "example.com/greedy" }
func (greedy) CanSupport(*v1.Volume) bool { return true }

type replacement struct{ attachable }

func (replacement) Name() string                   { return PluginEmptyDir }
func (replacement) CanSupport(vol *v1.Volume) bool { return vol.EmptyDir != nil }
func (replacement) SetUp(context.Context, *VolumeContext) (Mounted, error) {
	return Mounted{Path: "/replaced"}, nil
}

func TestPodDirectoriesAreClosedToOthers(t *testing.T) {
	f := newFixture(t, []runtime.Object{configMap("cfg", map[string]string{"k": "v1"})}, nil)
	f.run()
	got := f.mountPod(testPod("u1", cmVolume("c", "cfg", nil)))
	// <pods>/<uid>/volumes/<plugin>/<name>
	podDir := filepath.Dir(filepath.Dir(filepath.Dir(got["c"].Path)))
	for _, dir := range []string{podDir, filepath.Join(podDir, "volumes"), filepath.Join(podDir, "plugins")} {
		fi, err := os.Stat(dir)
		if err != nil {
			t.Errorf("%s: %v", dir, err)
		} else if fi.Mode().Perm() != 0o750 {
			t.Errorf("%s has mode %04o, want 0750 as the kubelet's", dir, fi.Mode().Perm())
		}
	}
}
