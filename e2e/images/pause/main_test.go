package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestPauseExitsZeroOnSignal builds the program statically, starts it and
// checks that it keeps running once its handlers are installed and exits 0 on
// SIGTERM and on SIGINT.
func TestPauseExitsZeroOnSignal(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "pause")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build pause: %v\n%s", err, out)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(bin)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			t.Cleanup(func() { _ = cmd.Process.Kill() })

			// Wait until the process catches the signal, so it is not
			// delivered to the default handler.
			err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				caught, err := caughtSignals(cmd.Process.Pid)
				return caught&(1<<(uint(sig)-1)) != 0, err
			})
			if err != nil {
				t.Fatalf("pause never installed a handler for %s: %v", sig, err)
			}
			select {
			case err := <-done:
				t.Fatalf("pause exited before it was signalled: %v", err)
			default:
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("pause exited with %v on %s, want status 0", err, sig)
				}
			case <-time.After(time.Minute):
				t.Fatalf("pause did not exit on %s", sig)
			}
		})
	}
}

// caughtSignals returns the SigCgt mask of a process from /proc.
func caughtSignals(pid int) (uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "SigCgt:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, fmt.Errorf("no SigCgt in /proc/%d/status", pid)
}

func TestPauseRejectsArguments(t *testing.T) {
	if os.Getenv("PAUSE_TEST_CHILD") == "1" {
		os.Args = []string{"pause", "extra"}
		main()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPauseRejectsArguments$")
	cmd.Env = append(os.Environ(), "PAUSE_TEST_CHILD=1")
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("pause with an argument: got %v, want exit status 2", err)
	}
}
