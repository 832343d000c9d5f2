package userns

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

const ids = DefaultIDsPerPod

// supported is a runtime that supports user namespaces on its default
// handler and not on "kata".
func supported(context.Context) ([]*runtimeapi.RuntimeHandler, error) {
	return []*runtimeapi.RuntimeHandler{
		{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: true}},
		{Name: "kata", Features: &runtimeapi.RuntimeHandlerFeatures{}},
	}, nil
}

// testOptions gives out slots ranges from host ID 2*65536, the search
// always starting at the first.
func testOptions(dir string, slots uint32) Options {
	return Options{
		PodsDir: dir,
		MaxPods: int(slots),
		Mappings: func(_ context.Context, perPod uint32) (uint32, uint32, error) {
			return 2 * perPod, slots * perPod, nil
		},
		Handlers: supported,
		intn:     func(int) int { return 0 },
	}
}

func newManager(t *testing.T, opts Options) *Manager {
	t.Helper()
	m, err := New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func usernsPod(uid string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: uid, Namespace: "default", UID: types.UID(uid)},
		Spec: v1.PodSpec{HostUsers: ptr.To(false)}}
}

// hostID returns the single mapping's host ID, checking that the user
// and group mappings are the same one from container ID 0.
func hostID(t *testing.T, ns *runtimeapi.UserNamespace) uint32 {
	t.Helper()
	if ns.GetMode() != runtimeapi.NamespaceMode_POD || len(ns.GetUids()) != 1 || len(ns.GetGids()) != 1 {
		t.Fatalf("user namespace %v, want mode POD with one uid and one gid mapping", ns)
	}
	u, g := ns.GetUids()[0], ns.GetGids()[0]
	if u.GetContainerId() != 0 || u.GetLength() != ids || u.GetHostId() != g.GetHostId() || g.GetContainerId() != 0 || g.GetLength() != ids {
		t.Fatalf("mappings uid %v gid %v, want container IDs 0-65535 on one host range", u, g)
	}
	return u.GetHostId()
}

func TestAllocationAndFile(t *testing.T) {
	dir := t.TempDir()
	m := newManager(t, testOptions(dir, 4))
	ctx := t.Context()

	for _, pod := range []*v1.Pod{{ObjectMeta: metav1.ObjectMeta{UID: "host"}}, {ObjectMeta: metav1.ObjectMeta{UID: "host-true"}, Spec: v1.PodSpec{HostUsers: ptr.To(true)}}} {
		ns, err := m.PodUserNamespace(ctx, pod, "")
		if err != nil || ns.GetMode() != runtimeapi.NamespaceMode_NODE || len(ns.GetUids()) != 0 {
			t.Errorf("pod %s: %v, %v; want mode NODE", pod.UID, ns, err)
		}
		if _, err := os.Stat(filepath.Join(dir, string(pod.UID))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pod %s in the node's user namespace got a directory: %v", pod.UID, err)
		}
	}

	a, err := m.PodUserNamespace(ctx, usernsPod("a"), "")
	if err != nil {
		t.Fatal(err)
	}
	if got := hostID(t, a); got != 2*ids {
		t.Errorf("first pod's host ID %d, want %d", got, 2*ids)
	}
	// The kubelet's file, byte for byte.
	b, err := os.ReadFile(filepath.Join(dir, "a", MappingsFile))
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"uidMappings":[{"hostId":131072,"containerId":0,"length":65536}],"gidMappings":[{"hostId":131072,"containerId":0,"length":65536}]}`
	if string(b) != want {
		t.Errorf("userns file %s, want %s", b, want)
	}
	again, err := m.PodUserNamespace(ctx, usernsPod("a"), "")
	if err != nil || hostID(t, again) != 2*ids {
		t.Errorf("pod a asked again: %v, %v; want the same range", again, err)
	}
	bns, err := m.PodUserNamespace(ctx, usernsPod("b"), "")
	if err != nil {
		t.Fatal(err)
	}
	if got := hostID(t, bns); got != 3*ids {
		t.Errorf("second pod's host ID %d, want the next free range %d", got, 3*ids)
	}
}

func TestRandomStart(t *testing.T) {
	opts := testOptions(t.TempDir(), 4)
	opts.intn = func(n int) int {
		if n != 4 {
			t.Errorf("intn(%d), want the number of ranges, 4", n)
		}
		return 3
	}
	m := newManager(t, opts)
	for i, want := range []uint32{5 * ids, 2 * ids} { // slot 3 taken: wraps to slot 0
		ns, err := m.PodUserNamespace(t.Context(), usernsPod(string(rune('a'+i))), "")
		if err != nil {
			t.Fatal(err)
		}
		if got := hostID(t, ns); got != want {
			t.Errorf("pod %d's host ID %d, want %d", i, got, want)
		}
	}
}

func TestReloadFromPodDirs(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	m := newManager(t, testOptions(dir, 3))
	for _, uid := range []string{"a", "b"} {
		if _, err := m.PodUserNamespace(ctx, usernsPod(uid), ""); err != nil {
			t.Fatal(err)
		}
	}
	// A pod directory without the file (a pod in the node's namespace)
	// and a stray file next to the directories are ignored.
	if err := os.MkdirAll(filepath.Join(dir, "plain", "volumes"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "stray"), nil, 0o600); err != nil {
		t.Fatal(err)
	}

	restarted := newManager(t, testOptions(dir, 3))
	for uid, want := range map[types.UID]uint32{"a": 2 * ids, "b": 3 * ids} {
		if got, ok := restarted.Allocated(uid); !ok || got != want {
			t.Errorf("after the restart pod %s has %d (%t), want %d", uid, got, ok, want)
		}
		ns, err := restarted.PodUserNamespace(ctx, usernsPod(string(uid)), "")
		if err != nil || hostID(t, ns) != want {
			t.Errorf("after the restart pod %s: %v, %v; want host ID %d", uid, ns, err, want)
		}
	}
	if _, ok := restarted.Allocated("plain"); ok {
		t.Error("a pod without a userns file got a range")
	}
	c, err := restarted.PodUserNamespace(ctx, usernsPod("c"), "")
	if err != nil || hostID(t, c) != 4*ids {
		t.Errorf("new pod after the restart: %v, %v; want the only free range %d", c, err, 4*ids)
	}
}

func TestReadKubeletFile(t *testing.T) {
	dir := t.TempDir()
	// As a kubelet with the default range left it.
	write := func(uid, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, uid), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, uid, MappingsFile), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("kubelet-pod", `{"uidMappings":[{"hostId":1879048192,"containerId":0,"length":65536}],"gidMappings":[{"hostId":1879048192,"containerId":0,"length":65536}]}`)
	opts := testOptions(dir, 0)
	// KubeletMappings' default: every ID from 65536.
	opts.Mappings = func(context.Context, uint32) (uint32, uint32, error) { return ids, 1<<32 - ids, nil }
	opts.MaxPods = 110
	m := newManager(t, opts)
	if got, ok := m.Allocated("kubelet-pod"); !ok || got != 1879048192 {
		t.Errorf("kubelet's pod has %d (%t), want 1879048192", got, ok)
	}

	for name, content := range map[string]string{
		"not JSON":         `{`,
		"two mappings":     `{"uidMappings":[{"hostId":131072,"containerId":0,"length":65536},{"hostId":196608,"containerId":65536,"length":65536}],"gidMappings":[{"hostId":131072,"containerId":0,"length":65536}]}`,
		"different gids":   `{"uidMappings":[{"hostId":131072,"containerId":0,"length":65536}],"gidMappings":[{"hostId":196608,"containerId":0,"length":65536}]}`,
		"root not mapped":  `{"uidMappings":[{"hostId":131072,"containerId":1,"length":65536}],"gidMappings":[{"hostId":131072,"containerId":1,"length":65536}]}`,
		"wrong length":     `{"uidMappings":[{"hostId":131072,"containerId":0,"length":1000}],"gidMappings":[{"hostId":131072,"containerId":0,"length":1000}]}`,
		"outside the node": `{"uidMappings":[{"hostId":65536,"containerId":0,"length":65536}],"gidMappings":[{"hostId":65536,"containerId":0,"length":65536}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "bad"), 0o750); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "bad", MappingsFile), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := New(t.Context(), testOptions(dir, 2))
			if err == nil || !strings.Contains(err.Error(), `existing pod "bad"`) {
				t.Errorf("New over a bad userns file: %v, want an error naming the pod", err)
			}
		})
	}
	t.Run("range taken twice", func(t *testing.T) {
		dir := t.TempDir()
		for _, uid := range []string{"x", "y"} {
			if err := os.MkdirAll(filepath.Join(dir, uid), 0o750); err != nil {
				t.Fatal(err)
			}
			content := `{"uidMappings":[{"hostId":131072,"containerId":0,"length":65536}],"gidMappings":[{"hostId":131072,"containerId":0,"length":65536}]}`
			if err := os.WriteFile(filepath.Join(dir, uid, MappingsFile), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := New(t.Context(), testOptions(dir, 2)); err == nil || !strings.Contains(err.Error(), "already taken") {
			t.Errorf("New over two pods with one range: %v, want already taken", err)
		}
	})
}

func TestReleaseAndExhaustion(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	m := newManager(t, testOptions(dir, 2))
	for _, uid := range []string{"a", "b"} {
		if _, err := m.PodUserNamespace(ctx, usernsPod(uid), ""); err != nil {
			t.Fatal(err)
		}
	}
	_, err := m.PodUserNamespace(ctx, usernsPod("c"), "")
	if err == nil || err.Error() != "create user namespace: could not find an empty slot to allocate a user namespace" {
		t.Fatalf("third pod on a node of two ranges: %v, want the kubelet's exhaustion error", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "c", MappingsFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused pod got a userns file: %v", err)
	}

	m.Release(ctx, "a")
	m.Release(ctx, "a") // twice is a no-op
	m.Release(ctx, "never")
	if _, ok := m.Allocated("a"); ok {
		t.Error("pod a still has a range after Release")
	}
	if _, err := os.Stat(filepath.Join(dir, "a", MappingsFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pod a's userns file after Release: %v", err)
	}
	c, err := m.PodUserNamespace(ctx, usernsPod("c"), "")
	if err != nil || hostID(t, c) != 2*ids {
		t.Errorf("pod c after a's release: %v, %v; want a's range %d", c, err, 2*ids)
	}
}

func TestCleanupOrphans(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	known := map[types.UID]bool{"a": true, "b": true}
	opts := testOptions(dir, 3)
	opts.PodKnown = func(uid types.UID) bool { return known[uid] }
	m := newManager(t, opts)
	for _, uid := range []string{"a", "b"} {
		if _, err := m.PodUserNamespace(ctx, usernsPod(uid), ""); err != nil {
			t.Fatal(err)
		}
	}
	m.CleanupOrphans(ctx)
	if _, ok := m.Allocated("b"); !ok {
		t.Fatal("a known pod lost its range")
	}
	delete(known, "b")
	m.CleanupOrphans(ctx)
	if _, ok := m.Allocated("b"); ok {
		t.Error("an unknown pod kept its range")
	}
	if _, ok := m.Allocated("a"); !ok {
		t.Error("a known pod lost its range")
	}
	if _, err := os.Stat(filepath.Join(dir, "b", MappingsFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an orphan's userns file after the cleanup: %v", err)
	}
}

func TestRuntimeHandlerSupport(t *testing.T) {
	ctx := t.Context()
	for _, tc := range []struct {
		name     string
		handlers []*runtimeapi.RuntimeHandler
		handler  string
		want     string
	}{
		{name: "no handlers (containerd 1.6)", want: "can't set `spec.hostUsers: false`, runtime does not support user namespaces"},
		{name: "default handler without the feature", handlers: []*runtimeapi.RuntimeHandler{{Name: ""}, {Name: "runc"}},
			want: "can't set `spec.hostUsers: false`, runtime does not support user namespaces"},
		{name: "runtime class handler without the feature", handlers: must(supported(ctx)), handler: "kata",
			want: "can't set `spec.hostUsers: false`, RuntimeClass handler \"kata\" does not support user namespaces"},
		{name: "unknown handler", handlers: must(supported(ctx)), handler: "gvisor",
			want: "can't set `spec.hostUsers: false`, RuntimeClass handler \"gvisor\" does not support user namespaces: the handler \"gvisor\" is not known"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := testOptions(dir, 2)
			opts.Handlers = func(context.Context) ([]*runtimeapi.RuntimeHandler, error) {
				return tc.handlers, errors.New("ignored: the handlers last heard count")
			}
			m := newManager(t, opts)
			ns, err := m.PodUserNamespace(ctx, usernsPod("p"), tc.handler)
			if err == nil || err.Error() != tc.want {
				t.Errorf("got %v, %v; want %q", ns, err, tc.want)
			}
			if _, ok := m.Allocated("p"); ok {
				t.Error("a refused pod got a range")
			}
			if ns, err := m.PodUserNamespace(ctx, &v1.Pod{}, tc.handler); err != nil || ns.GetMode() != runtimeapi.NamespaceMode_NODE {
				t.Errorf("a pod in the node's namespace: %v, %v", ns, err)
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestNodeRangeChecks(t *testing.T) {
	for _, tc := range []struct {
		name          string
		first, length uint32
		perPod        int64
		maxPods       int
		want          string
	}{
		{name: "ID 0 mapped", first: 0, length: 8 * ids, maxPods: 1, want: "kubelet user assigned ID 0 must be greater or equal to 65536"},
		{name: "unaligned first", first: ids + 1, length: 8 * ids, maxPods: 1, want: "kubelet user assigned ID 65537 is not a multiple of 65536"},
		{name: "unaligned length", first: ids, length: 8*ids + 5, maxPods: 1, want: "kubelet user assigned IDs length 524293 is not a multiple of 65536"},
		{name: "too few for maxPods", first: ids, length: 100 * ids, maxPods: 110, want: "kubelet user assigned IDs are not enough to support 110 pods"},
		{name: "idsPerPod not a multiple", first: ids, length: 8 * ids, perPod: ids + 1, want: "invalid configuration: userNamespaces.idsPerPod must be a multiple of 65536"},
		{name: "idsPerPod too small", first: ids, length: 8 * ids, perPod: 1000, want: "invalid configuration: userNamespaces.idsPerPod must not be less than 65536"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(t.Context(), Options{PodsDir: t.TempDir(), IDsPerPod: tc.perPod, MaxPods: tc.maxPods, Handlers: supported,
				Mappings: func(context.Context, uint32) (uint32, uint32, error) { return tc.first, tc.length, nil }})
			if err == nil || err.Error() != tc.want {
				t.Errorf("New: %v, want %q", err, tc.want)
			}
		})
	}
	// idsPerPod 131072 on the default range: 32767 ranges of 131072 IDs.
	opts := Options{PodsDir: t.TempDir(), IDsPerPod: 2 * ids, MaxPods: 110, Handlers: supported, intn: func(n int) int { return n - 1 }}
	m := newManager(t, opts)
	ns, err := m.PodUserNamespace(t.Context(), usernsPod("big"), "")
	if err != nil {
		t.Fatal(err)
	}
	if u := ns.GetUids()[0]; u.GetLength() != 2*ids || u.GetHostId() != 1<<32-2*ids {
		t.Errorf("last range of the default mapping with idsPerPod 131072: %v, want host ID %d, length %d", u, uint32(1<<32-2*ids), 2*ids)
	}
}

func TestKubeletMappings(t *testing.T) {
	ctx := t.Context()
	found := func(string) (*user.User, error) { return &user.User{Username: KubeletUser}, nil }
	tool := func(string) (string, error) { return "/usr/bin/getsubids", nil }
	answer := func(uids, gids string) func(context.Context, string, ...string) ([]byte, error) {
		return func(_ context.Context, name string, args ...string) ([]byte, error) {
			if name != "/usr/bin/getsubids" {
				t.Errorf("ran %s", name)
			}
			if len(args) == 2 && args[0] == "-g" && args[1] == KubeletUser {
				return []byte(gids), nil
			}
			if len(args) == 1 && args[0] == KubeletUser {
				return []byte(uids), nil
			}
			t.Errorf("getsubids %q", args)
			return nil, errors.New("unexpected")
		}
	}
	for _, tc := range []struct {
		name          string
		src           subIDSource
		first, length uint32
		err           string
	}{
		{name: "no kubelet user", src: subIDSource{lookupUser: func(n string) (*user.User, error) { return nil, user.UnknownUserError(n) }},
			first: ids, length: 1<<32 - ids},
		{name: "no /etc/passwd", src: subIDSource{lookupUser: func(string) (*user.User, error) {
			return nil, &fs.PathError{Op: "open", Path: "/etc/passwd", Err: fs.ErrNotExist}
		}}, first: ids, length: 1<<32 - ids},
		{name: "no getsubids", src: subIDSource{lookupUser: found, lookPath: func(f string) (string, error) { return "", &exec.Error{Name: f, Err: exec.ErrNotFound} }},
			first: ids, length: 1<<32 - ids},
		{name: "subordinate IDs", src: subIDSource{lookupUser: found, lookPath: tool, run: answer("0: kubelet 65536 2147483648\n", "0: kubelet 65536 2147483648\n")},
			first: 65536, length: 2147483648},
		{name: "users and groups differ", src: subIDSource{lookupUser: found, lookPath: tool, run: answer("0: kubelet 65536 2147483648\n", "0: kubelet 131072 2147483648\n")},
			err: `mismatched subuids and subgids for user "kubelet"`},
		{name: "two ranges", src: subIDSource{lookupUser: found, lookPath: tool, run: answer("0: kubelet 65536 65536\n1: kubelet 196608 65536\n", "0: kubelet 65536 65536\n1: kubelet 196608 65536\n")},
			err: "it must contain only one line"},
		{name: "no answer", src: subIDSource{lookupUser: found, lookPath: tool, run: func(context.Context, string, ...string) ([]byte, error) { return nil, errors.New("exit status 1") }},
			err: `error retrieving additional uids for user "kubelet": exit status 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, length, err := tc.src.mappings(ctx, ids)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("got %d, %d, %v; want error %q", first, length, err, tc.err)
				}
				return
			}
			if err != nil || first != tc.first || length != tc.length {
				t.Errorf("got %d, %d, %v; want %d, %d", first, length, err, tc.first, tc.length)
			}
		})
	}
}

// TestRunWaitsWhileNothingIsAllocated: Run's rounds stop, with no timer
// armed, once a round leaves no range allocated, and start again with the
// next allocation, whose orphan they release.
func TestRunWaitsWhileNothingIsAllocated(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	var mu sync.Mutex
	known := map[types.UID]bool{}
	opts := testOptions(t.TempDir(), 3)
	opts.Clock = clk
	opts.PodKnown = func(uid types.UID) bool {
		mu.Lock()
		defer mu.Unlock()
		return known[uid]
	}
	m := newManager(t, opts)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting until %s", what)
			}
		}
	}
	waitFor("Run waits for its first round", clk.HasWaiters)
	clk.Step(DefaultCleanupPeriod)
	waitFor("Run waits for an allocation with no timer armed", func() bool { return !clk.HasWaiters() })

	mu.Lock()
	known["a"] = true
	mu.Unlock()
	if _, err := m.PodUserNamespace(ctx, usernsPod("a"), ""); err != nil {
		t.Fatal(err)
	}
	waitFor("Run arms its timer after the allocation", clk.HasWaiters)
	clk.Step(DefaultCleanupPeriod)
	waitFor("the next round, a known pod's range kept", clk.HasWaiters)
	if _, ok := m.Allocated("a"); !ok {
		t.Fatal("a known pod lost its range")
	}
	mu.Lock()
	delete(known, "a")
	mu.Unlock()
	clk.Step(DefaultCleanupPeriod)
	waitFor("the orphan's range released", func() bool { _, ok := m.Allocated("a"); return !ok })
	waitFor("Run waits again with no timer armed", func() bool { return !clk.HasWaiters() })
}
