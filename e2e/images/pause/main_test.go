package main

import (
	"context"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

func TestPauseExitsZeroOnTermAndInt(t *testing.T) {
	for _, sig := range []os.Signal{syscall.SIGTERM, syscall.SIGINT} {
		signals := make(chan os.Signal, 2)
		done := make(chan int, 1)
		go func() { done <- run(nil, signals, io.Discard) }()
		signals <- syscall.SIGCHLD // reaps (nothing) and keeps running
		signals <- sig
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("on %s: exit status %d, want 0", sig, code)
			}
		case <-time.After(time.Minute):
			t.Fatalf("pause did not return on %s", sig)
		}
	}
}

func TestPauseReapsChildrenOnSIGCHLD(t *testing.T) {
	// A child this process starts and never waits for: a zombie once it
	// exits, until reaped.
	pid, err := syscall.ForkExec("/bin/sh", []string{"sh", "-c", "exit 0"}, &syscall.ProcAttr{})
	if err != nil {
		t.Skipf("cannot start /bin/sh: %v", err)
	}
	signals := make(chan os.Signal, 2)
	done := make(chan int, 1)
	go func() { done <- run(nil, signals, io.Discard) }()
	// The child may not have exited when a SIGCHLD is handled: signal
	// until it is reaped, i.e. no longer this process's child.
	err = wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		signals <- syscall.SIGCHLD
		_, err := syscall.Wait4(pid, nil, syscall.WNOHANG, nil)
		return errors.Is(err, syscall.ECHILD), nil
	})
	if err != nil {
		t.Fatalf("child %d never reaped: %v", pid, err)
	}
	signals <- syscall.SIGTERM
	if code := <-done; code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
}

func TestPauseRejectsArguments(t *testing.T) {
	var stderr strings.Builder
	if code := run([]string{"extra"}, nil, &stderr); code != 2 || !strings.Contains(stderr.String(), "usage") {
		t.Errorf("with an argument: status %d, stderr %q; want 2 and the usage", code, stderr.String())
	}
}

// TestPauseBuildsStatic builds the program as the harness does and checks it
// needs no loader, so it runs in an image that holds nothing else.
func TestPauseBuildsStatic(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "pause")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build pause: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the pause binary needs a dynamic loader (PT_INTERP)")
		}
	}
}
