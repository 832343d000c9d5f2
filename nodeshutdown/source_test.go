package nodeshutdown

import (
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestSignalSource: each signal received is a shutdown, and the signal
// no longer ends the process.
func TestSignalSource(t *testing.T) {
	// Catch the signal here too, so none ends the test binary before the
	// source listens.
	guard := make(chan os.Signal, 10)
	signal.Notify(guard, syscall.SIGUSR2)
	defer signal.Stop(guard)

	src := NewSignalSource(syscall.SIGUSR2)
	if src.String() != "signal(user defined signal 2)" {
		t.Errorf("String = %q", src.String())
	}
	ctx, cancel := context.WithCancel(t.Context())
	handled := make(chan bool, 10)
	watched := make(chan error, 1)
	go func() {
		watched <- src.Watch(ctx, func(_ context.Context, down bool) { handled <- down })
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var down bool
wait:
	for {
		if err := syscall.Kill(os.Getpid(), syscall.SIGUSR2); err != nil {
			t.Fatal(err)
		}
		select {
		case down = <-handled:
			break wait
		case <-tick.C:
		}
	}
	if !down {
		t.Error("the signal was handled as a cancellation")
	}
	cancel()
	if err := <-watched; err != nil {
		t.Errorf("Watch = %v, want nil once ctx is done", err)
	}
}

// fakeBus is logindBus: locks are pipe descriptors, so a released lock is
// a closed one.
type fakeBus struct {
	t       *testing.T
	mu      sync.Mutex
	delay   time.Duration
	reload  time.Duration // the delay logind has after a reload
	reloads int
	locks   []*os.File
	fds     []int
	events  chan bool
}

func (b *fakeBus) InhibitDelayMax() (time.Duration, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.delay, nil
}

func (b *fakeBus) Inhibit() (int, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return -1, err
	}
	b.t.Cleanup(func() { _ = r.Close() })
	// The source owns w's descriptor from here.
	fd, err := syscall.Dup(int(w.Fd()))
	_ = w.Close()
	if err != nil {
		return -1, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.locks = append(b.locks, r)
	b.fds = append(b.fds, fd)
	return fd, nil
}

func (b *fakeBus) ReloadLogind() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reloads++
	b.delay = b.reload
	return nil
}

func (b *fakeBus) PrepareForShutdown() (<-chan bool, error) { return b.events, nil }
func (b *fakeBus) Close() error                             { return nil }

// released reports whether lock i was released: its pipe's read end sees
// EOF.
func (b *fakeBus) released(i int) bool {
	b.mu.Lock()
	r := b.locks[i]
	b.mu.Unlock()
	_ = r.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	n, err := r.Read(make([]byte, 1))
	return n == 0 && err != nil && !os.IsTimeout(err)
}

func (b *fakeBus) lockCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.locks)
}

// TestLogindSource: a too-short InhibitDelayMaxSec is overridden as the
// kubelet does; the lock is held until the shutdown was handled, and taken
// again after a cancellation.
func TestLogindSource(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "logind.conf.d")
	bus := &fakeBus{t: t, delay: 5 * time.Second, reload: 30 * time.Second, events: make(chan bool)}
	src := NewLogindSource(LogindOptions{InhibitDelay: 30 * time.Second, ConfigDir: dir})
	src.opts.connect = func() (logindBus, error) { return bus, nil }

	ctx, cancel := context.WithCancel(t.Context())
	handled := make(chan bool)
	release := make(chan struct{})
	watched := make(chan error, 1)
	go func() {
		watched <- src.Watch(ctx, func(_ context.Context, down bool) {
			handled <- down
			<-release
		})
	}()
	bus.events <- true
	if down := <-handled; !down {
		t.Fatal("PrepareForShutdown(true) handled as a cancellation")
	}
	b, err := os.ReadFile(filepath.Join(dir, "99-kubelet.conf"))
	if err != nil || string(b) != "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=30\n" || bus.reloads != 1 {
		t.Errorf("override %q (%v) after %d reloads, want InhibitDelayMaxSec=30 after 1", b, err, bus.reloads)
	}
	if bus.lockCount() != 1 {
		t.Fatalf("%d locks taken, want 1", bus.lockCount())
	}
	if bus.released(0) {
		t.Fatal("the inhibitor lock was released before the shutdown was handled")
	}
	release <- struct{}{}
	bus.events <- false // a cancellation: the lock is taken again
	if down := <-handled; down {
		t.Fatal("PrepareForShutdown(false) handled as a shutdown")
	}
	if !bus.released(0) {
		t.Error("the inhibitor lock was not released once the shutdown was handled")
	}
	release <- struct{}{}
	cancel()
	if err := <-watched; err != nil {
		t.Errorf("Watch = %v", err)
	}
	if bus.lockCount() != 2 || !bus.released(1) {
		t.Errorf("%d locks; want a second one after the cancellation, released when Watch returned", bus.lockCount())
	}
}

// TestLogindSourceDelayNotTaken: logind not taking the override is an
// error, as the kubelet's.
func TestLogindSourceDelayNotTaken(t *testing.T) {
	bus := &fakeBus{t: t, delay: 5 * time.Second, reload: 5 * time.Second, events: make(chan bool)}
	src := NewLogindSource(LogindOptions{InhibitDelay: 30 * time.Second, ConfigDir: t.TempDir()})
	src.opts.connect = func() (logindBus, error) { return bus, nil }
	err := src.Watch(t.Context(), func(context.Context, bool) { t.Error("handled a shutdown") })
	if err == nil || bus.lockCount() != 0 {
		t.Errorf("Watch = %v with %d locks, want an error and no lock", err, bus.lockCount())
	}
}
