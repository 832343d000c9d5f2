package eviction

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodekit/nodekit/internal/testenv"
)

// needMemcgV1 skips (fails under CI=true) unless the test runs as root with
// the cgroup v1 memory controller mounted at DefaultMemoryCgroupDir.
func needMemcgV1(t *testing.T) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "needs root"
	} else if _, err := os.Stat(filepath.Join(DefaultMemoryCgroupDir, "cgroup.event_control")); err != nil {
		why = "needs the cgroup v1 memory controller at " + DefaultMemoryCgroupDir
	}
	if why == "" {
		return
	}
	testenv.Unavailable(t, "memcg threshold test %s", why)
}

func TestMemcgThresholdKernel(t *testing.T) {
	needMemcgV1(t)
	dir := filepath.Join(DefaultMemoryCgroupDir, fmt.Sprintf("nodekit-eviction-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Skip("needs a tmpfs at /dev/shm")
	}
	file := filepath.Join("/dev/shm", filepath.Base(dir))
	t.Cleanup(func() {
		os.Remove(file)
		// The cgroup is empty once the writer exited; retry briefly while
		// the kernel reaps it.
		for i := 0; i < 50; i++ {
			if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("cgroup %s left behind", dir)
	})

	if usage, err := os.ReadFile(filepath.Join(dir, "memory.usage_in_bytes")); err != nil || string(usage) != "0\n" {
		t.Fatalf("new cgroup's usage %q, %v; want 0", usage, err)
	}
	w, err := openMemcgThreshold(dir, 4*Mi)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fired := make(chan error, 1)
	go func() { fired <- w.Wait() }()
	select {
	case err := <-fired:
		t.Fatalf("notified (%v) before any usage", err)
	default:
	}

	// A shell joins the cgroup and writes 16 MiB to tmpfs: the pages are
	// charged to the cgroup, its usage crosses 4 MiB.
	cmd := exec.Command("sh", "-c", fmt.Sprintf("echo $$ > %s/cgroup.procs && dd if=/dev/zero of=%s bs=1M count=16 2>/dev/null", dir, file))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("writer: %v: %s", err, out)
	}
	select {
	case err := <-fired:
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no notification after the cgroup's usage crossed the threshold")
	}
}

func TestMemcgCloseUnblocksWait(t *testing.T) {
	needMemcgV1(t)
	// Threshold far above any usage: only Close can end the Wait.
	w, err := openMemcgThreshold(DefaultMemoryCgroupDir, 1<<62)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Wait() }()
	time.Sleep(10 * time.Millisecond)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Error("Wait returned nil after Close")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not unblock Wait")
	}
}

func TestMemcgUnsupportedWithoutEventControl(t *testing.T) {
	_, err := openMemcgThreshold(t.TempDir(), 1)
	if !errors.Is(err, errMemcgUnsupported) {
		t.Errorf("error %v, want errMemcgUnsupported", err)
	}
}
