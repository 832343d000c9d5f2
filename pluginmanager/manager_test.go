package pluginmanager

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// fakeRegistrar is a plugin's registration server, as node-driver-registrar.
type fakeRegistrar struct {
	registerapi.UnimplementedRegistrationServer
	info   *registerapi.PluginInfo
	status chan *registerapi.RegistrationStatus
	srv    *grpc.Server
	path   string
}

func (f *fakeRegistrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return f.info, nil
}

func (f *fakeRegistrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	f.status <- s
	return &registerapi.RegistrationStatusResponse{}, nil
}

// startRegistrar serves a registrar of a plugin named name of pluginType
// at path until stopped (which removes the socket).
func startRegistrar(t *testing.T, path, pluginType, name string) *fakeRegistrar {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRegistrar{
		info:   &registerapi.PluginInfo{Type: pluginType, Name: name, Endpoint: "/csi/" + name + ".sock", SupportedVersions: []string{"1.0.0"}},
		status: make(chan *registerapi.RegistrationStatus, 10),
		srv:    grpc.NewServer(),
		path:   path,
	}
	registerapi.RegisterRegistrationServer(f.srv, f)
	go func() { _ = f.srv.Serve(l) }()
	t.Cleanup(f.srv.Stop)
	return f
}

func (f *fakeRegistrar) waitStatus(t *testing.T) *registerapi.RegistrationStatus {
	t.Helper()
	select {
	case s := <-f.status:
		return s
	case <-time.After(20 * time.Second):
		t.Fatalf("no registration status sent to %s", f.path)
		return nil
	}
}

// fakeHandler records its calls; validate, when set, answers ValidatePlugin.
type fakeHandler struct {
	calls    chan string
	mu       sync.Mutex
	validate func(name string) error
}

func newFakeHandler() *fakeHandler { return &fakeHandler{calls: make(chan string, 20)} }

func (h *fakeHandler) ValidatePlugin(_ context.Context, name, endpoint string, versions []string) error {
	h.calls <- fmt.Sprintf("validate %s %s %v", name, endpoint, versions)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.validate != nil {
		return h.validate(name)
	}
	return nil
}

func (h *fakeHandler) RegisterPlugin(_ context.Context, name, endpoint string, _ []string, timeout *time.Duration) error {
	h.calls <- fmt.Sprintf("register %s %s %v", name, endpoint, timeout)
	return nil
}

func (h *fakeHandler) DeRegisterPlugin(_ context.Context, name, endpoint string) {
	h.calls <- fmt.Sprintf("deregister %s %s", name, endpoint)
}

func (h *fakeHandler) want(t *testing.T, want ...string) {
	t.Helper()
	for _, w := range want {
		select {
		case got := <-h.calls:
			if got != w {
				t.Fatalf("handler call %q, want %q", got, w)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no handler call, want %q", w)
		}
	}
}

func (h *fakeHandler) wantNone(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case got := <-h.calls:
		t.Fatalf("unexpected handler call %q", got)
	case <-time.After(within):
	}
}

// runManager runs a Manager on dir with h for CSIPlugin until the test
// ends.
func runManager(t *testing.T, dir string, h Handler, reg prometheus.Registerer) *Manager {
	t.Helper()
	m, err := New(Options{Dir: dir, Handlers: map[string]Handler{registerapi.CSIPlugin: h}, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return m
}

func TestRegisterAndDeRegister(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "plugins_registry")
	h := newFakeHandler()
	reg := prometheus.NewPedanticRegistry()
	m := runManager(t, dir, h, reg)
	// Run creates the directory; wait for it before binding the socket.
	waitFor(t, func() bool { fi, err := os.Stat(dir); return err == nil && fi.Mode().Perm() == 0o750 })

	sock := filepath.Join(dir, "drv-reg.sock")
	// Whether the socket is bound before or after the watch starts, it is
	// registered once (the start scans the directory after watching it).
	r := startRegistrar(t, sock, registerapi.CSIPlugin, "drv")
	h.want(t, "validate drv /csi/drv.sock [1.0.0]", "register drv /csi/drv.sock <nil>")
	if s := r.waitStatus(t); !s.PluginRegistered || s.Error != "" {
		t.Fatalf("status %+v, want registered", s)
	}
	waitRegistered(t, m, sock)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(fmt.Sprintf(`
# HELP plugin_manager_total_plugins Number of plugins in Plugin Manager
# TYPE plugin_manager_total_plugins gauge
plugin_manager_total_plugins{socket_path=%[1]q,state="actual_state_of_world"} 1
plugin_manager_total_plugins{socket_path=%[1]q,state="desired_state_of_world"} 1
`, sock)), "plugin_manager_total_plugins"); err != nil {
		t.Fatal(err)
	}

	r.srv.Stop() // removes the socket
	h.want(t, "deregister drv /csi/drv.sock")
	h.wantNone(t, 200*time.Millisecond)
}

func TestSocketsPresentAtStart(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	r1 := startRegistrar(t, filepath.Join(dir, "a.sock"), registerapi.CSIPlugin, "a")
	r2 := startRegistrar(t, filepath.Join(dir, "sub", "b.sock"), registerapi.CSIPlugin, "b")
	// Ignored: hidden sockets and files that are not sockets.
	startRegistrar(t, filepath.Join(dir, ".hidden.sock"), registerapi.CSIPlugin, "hidden")
	if err := os.WriteFile(filepath.Join(dir, "c.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	h := newFakeHandler()
	m := runManager(t, dir, h, nil)
	for _, r := range []*fakeRegistrar{r1, r2} {
		if s := r.waitStatus(t); !s.PluginRegistered {
			t.Fatalf("%s: status %+v", r.path, s)
		}
	}
	got := map[string]bool{}
	for range 4 {
		got[<-h.calls] = true
	}
	for _, w := range []string{"validate a /csi/a.sock [1.0.0]", "register a /csi/a.sock <nil>",
		"validate b /csi/b.sock [1.0.0]", "register b /csi/b.sock <nil>"} {
		if !got[w] {
			t.Errorf("no call %q in %v", w, got)
		}
	}
	h.wantNone(t, 200*time.Millisecond)

	// A subdirectory created later is watched too.
	sub2 := filepath.Join(dir, "sub2")
	if err := os.Mkdir(sub2, 0o755); err != nil {
		t.Fatal(err)
	}
	r3 := startRegistrar(t, filepath.Join(sub2, "c.sock"), registerapi.CSIPlugin, "c")
	h.want(t, "validate c /csi/c.sock [1.0.0]", "register c /csi/c.sock <nil>")
	r3.waitStatus(t)
	waitRegistered(t, m, r3.path)
	// Removing the directory de-registers what was in it.
	if err := os.RemoveAll(sub2); err != nil {
		t.Fatal(err)
	}
	h.want(t, "deregister c /csi/c.sock")
}

func TestNoHandlerForType(t *testing.T) {
	dir := t.TempDir()
	h := newFakeHandler()
	r := startRegistrar(t, filepath.Join(dir, "dra.sock"), registerapi.DRAPlugin, "dra")
	runManager(t, dir, h, nil)
	s := r.waitStatus(t)
	if s.PluginRegistered || !strings.Contains(s.Error, "no handler registered for plugin type: DRAPlugin") {
		t.Fatalf("status %+v, want a refusal naming the type", s)
	}
}

func TestValidationFailureIsSentAndRetried(t *testing.T) {
	dir := t.TempDir()
	h := newFakeHandler()
	fail := true
	h.validate = func(string) error {
		if fail {
			fail = false
			return errors.New("version 0.3 not supported")
		}
		return nil
	}
	r := startRegistrar(t, filepath.Join(dir, "drv.sock"), registerapi.CSIPlugin, "drv")
	start := time.Now()
	runManager(t, dir, h, nil)
	s := r.waitStatus(t)
	if s.PluginRegistered || !strings.Contains(s.Error, "plugin validation failed with err: version 0.3 not supported") {
		t.Fatalf("status %+v, want the validation error", s)
	}
	h.want(t, "validate drv /csi/drv.sock [1.0.0]")
	// Retried after the initial back-off.
	if s := r.waitStatus(t); !s.PluginRegistered {
		t.Fatalf("status %+v, want registered on retry", s)
	}
	if d := time.Since(start); d < initialBackoff {
		t.Errorf("retried after %v, before the back-off of %v", d, initialBackoff)
	}
	h.want(t, "validate drv /csi/drv.sock [1.0.0]", "register drv /csi/drv.sock <nil>")
}

func TestRecreatedSocketRegistersAgain(t *testing.T) {
	dir := t.TempDir()
	h := newFakeHandler()
	path := filepath.Join(dir, "drv.sock")
	r := startRegistrar(t, path, registerapi.CSIPlugin, "drv")
	m := runManager(t, dir, h, nil)
	h.want(t, "validate drv /csi/drv.sock [1.0.0]", "register drv /csi/drv.sock <nil>")
	r.waitStatus(t)
	waitRegistered(t, m, path)
	r.srv.Stop()
	r = startRegistrar(t, path, registerapi.CSIPlugin, "drv")
	h.want(t, "deregister drv /csi/drv.sock", "validate drv /csi/drv.sock [1.0.0]", "register drv /csi/drv.sock <nil>")
	r.waitStatus(t)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 20 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitRegistered waits until m has recorded the registration of path
// (the plugin hears of it a moment before).
func waitRegistered(t *testing.T, m *Manager, path string) {
	t.Helper()
	waitFor(t, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		_, ok := m.actual[path]
		return ok
	})
}

// TestManagersShareTheWatch runs two Managers in one process (as a fleet
// of in-process agents does, on one inotify instance): each sees its own
// directory's sockets only, and one stopping leaves the other watching.
func TestManagersShareTheWatch(t *testing.T) {
	dir1, dir2 := t.TempDir(), t.TempDir()
	h1, h2 := newFakeHandler(), newFakeHandler()
	m1, err := New(Options{Dir: dir1, Handlers: map[string]Handler{registerapi.CSIPlugin: h1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx1, stop1 := context.WithCancel(context.Background())
	done1 := make(chan error, 1)
	go func() { done1 <- m1.Run(ctx1) }()
	runManager(t, dir2, h2, nil)

	r := startRegistrar(t, filepath.Join(dir1, "one.sock"), registerapi.CSIPlugin, "one")
	h1.want(t, "validate one /csi/one.sock [1.0.0]", "register one /csi/one.sock <nil>")
	r.waitStatus(t)
	waitRegistered(t, m1, r.path)
	stop1()
	if err := <-done1; err != nil {
		t.Fatal(err)
	}
	r = startRegistrar(t, filepath.Join(dir2, "two.sock"), registerapi.CSIPlugin, "two")
	h2.want(t, "validate two /csi/two.sock [1.0.0]", "register two /csi/two.sock <nil>")
	r.waitStatus(t)
	h1.wantNone(t, 100*time.Millisecond)
}

// TestPollingWhenInotifyFails runs a Manager whose inotify cannot be had:
// it lists the directory instead and registers, re-registers and
// de-registers all the same.
func TestPollingWhenInotifyFails(t *testing.T) {
	dir := t.TempDir()
	h := newFakeHandler()
	m, err := New(Options{Dir: dir, Handlers: map[string]Handler{registerapi.CSIPlugin: h}})
	if err != nil {
		t.Fatal(err)
	}
	m.watch = func() (watcher, error) { return nil, errors.New("too many open files") }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(sub, "drv.sock")
	r := startRegistrar(t, path, registerapi.CSIPlugin, "drv")
	h.want(t, "validate drv /csi/drv.sock [1.0.0]", "register drv /csi/drv.sock <nil>")
	r.waitStatus(t)
	waitRegistered(t, m, path)
	// Listing sees a socket replaced by its new inode or time, or, as
	// here, its removal and then the new one.
	r.srv.Stop()
	h.want(t, "deregister drv /csi/drv.sock")
	r = startRegistrar(t, path, registerapi.CSIPlugin, "drv")
	h.want(t, "validate drv /csi/drv.sock [1.0.0]", "register drv /csi/drv.sock <nil>")
	r.waitStatus(t)
	waitRegistered(t, m, path)
	r.srv.Stop()
	h.want(t, "deregister drv /csi/drv.sock")
}
