package cgroupdriver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
)

// fakeV1Tree makes a cgroup v1 layout: one directory per hierarchy, and
// the root cpuset values a new cpuset cgroup copies.
func fakeV1Tree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, h := range []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "devices", "systemd"} {
		if err := os.Mkdir(filepath.Join(root, h), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeTestFile(t, filepath.Join(root, "cpuset", "cpuset.cpus"), "0-1\n")
	writeTestFile(t, filepath.Join(root, "cpuset", "cpuset.mems"), "0\n")
	return root
}

// fakeV2Tree makes a cgroup v2 layout: a root offering controllers.
func fakeV2Tree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	writeTestFile(t, filepath.Join(root, "cgroup.controllers"), "cpuset cpu io memory hugetlb pids\n")
	return root
}

func writeTestFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readTestFile returns a file's trimmed content, or "<missing>".
func readTestFile(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return "<missing>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// expectFiles checks control files below dir, relative path -> content.
func expectFiles(t *testing.T, dir string, want map[string]string) {
	t.Helper()
	for rel, v := range want {
		if got := readTestFile(t, filepath.Join(dir, rel)); got != v {
			t.Errorf("%s = %q, want %q", rel, got, v)
		}
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// fakeSystemd is a SystemdConn recording what it is asked. Units are kept
// in a set; it creates no directories (the driver does).
type fakeSystemd struct {
	mu sync.Mutex
	// calls lists "start <unit>", "set <unit>", "stop <unit>", "reset <unit>"
	// and "version", in order.
	calls []string
	// started and set hold the properties of the last start and set call
	// per unit.
	started map[string][]sddbus.Property
	set     map[string][]sddbus.Property
	units   map[string]bool

	version    string // GetManagerProperty("Version"); "" fails
	jobResult  string // sent on job channels; "" sends nothing
	startErr   error  // returned by StartTransientUnit for a new unit
	closedOnce bool   // the first call fails with godbus.ErrClosed
	closed     bool
}

func newFakeSystemd() *fakeSystemd {
	return &fakeSystemd{
		started:   map[string][]sddbus.Property{},
		set:       map[string][]sddbus.Property{},
		units:     map[string]bool{},
		version:   `"252.22-1~deb12u1"`,
		jobResult: "done",
	}
}

// dial returns a Dial func handing out f and counting the dials.
func (f *fakeSystemd) dial(count *int) func(context.Context) (SystemdConn, error) {
	return func(context.Context) (SystemdConn, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		*count++
		return f, nil
	}
}

func (f *fakeSystemd) record(call string) error {
	f.calls = append(f.calls, call)
	if f.closedOnce {
		f.closedOnce = false
		return fmt.Errorf("call %s: %w", call, godbus.ErrClosed)
	}
	return nil
}

func (f *fakeSystemd) sendJob(ch chan<- string) {
	if f.jobResult != "" {
		ch <- f.jobResult
	}
}

func (f *fakeSystemd) StartTransientUnitContext(_ context.Context, name, mode string, props []sddbus.Property, ch chan<- string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("start " + name); err != nil {
		return 0, err
	}
	if mode != "replace" {
		return 0, fmt.Errorf("unexpected mode %q", mode)
	}
	if f.units[name] {
		return 0, godbus.Error{Name: dbusErrUnitExists, Body: []any{"unit " + name + " already exists"}}
	}
	if f.startErr != nil {
		return 0, f.startErr
	}
	f.units[name] = true
	f.started[name] = props
	f.sendJob(ch)
	return 1, nil
}

func (f *fakeSystemd) StopUnitContext(_ context.Context, name, mode string, ch chan<- string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("stop " + name); err != nil {
		return 0, err
	}
	if !f.units[name] {
		return 0, &godbus.Error{Name: dbusErrNoSuchUnit, Body: []any{"unit " + name + " not loaded"}}
	}
	delete(f.units, name)
	f.sendJob(ch)
	return 2, nil
}

func (f *fakeSystemd) SetUnitPropertiesContext(_ context.Context, name string, runtime bool, props ...sddbus.Property) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("set " + name); err != nil {
		return err
	}
	if !runtime {
		return errors.New("properties must be set at runtime only")
	}
	if !f.units[name] {
		return &godbus.Error{Name: dbusErrNoSuchUnit}
	}
	f.set[name] = props
	return nil
}

func (f *fakeSystemd) ResetFailedUnitContext(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.record("reset " + name)
}

func (f *fakeSystemd) GetManagerProperty(prop string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.record("version"); err != nil {
		return "", err
	}
	if prop != "Version" || f.version == "" {
		return "", errors.New("no such property")
	}
	return f.version, nil
}

func (f *fakeSystemd) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
}

// propMap renders properties as name -> value, for comparisons.
func propMap(props []sddbus.Property) map[string]any {
	m := map[string]any{}
	for _, p := range props {
		m[p.Name] = p.Value.Value()
	}
	return m
}

func (f *fakeSystemd) callList() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}
