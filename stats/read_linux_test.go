package stats

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestNodeFilesHeld reads a procfs file through heldFiles: the descriptor
// is kept and a later read sees the file's new content (read again from
// offset 0); once the file's object is gone (the thread it describes
// exited) the read opens the path again and reads what it names now.
func TestNodeFilesHeld(t *testing.T) {
	const path = "/proc/thread-self/comm"
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no %s: %v", path, err)
	}
	h := heldFiles{files: map[string]*heldFile{}}
	// onThread runs f on a thread of its own that exits with it (locked,
	// never unlocked), and returns that thread's ID. The main thread never
	// exits: a goroutine locked to it hands f to another thread.
	onThread := func(f func()) int {
		tid := make(chan int)
		var run func()
		run = func() {
			runtime.LockOSThread()
			if unix.Gettid() == unix.Getpid() {
				done := make(chan struct{})
				go func() { run(); close(done) }()
				<-done
				runtime.UnlockOSThread()
				return
			}
			f()
			tid <- unix.Gettid()
		}
		go run()
		return <-tid
	}
	readAs := func(name string) string {
		t.Helper()
		p, err := unix.BytePtrFromString(name)
		if err == nil {
			err = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(p)), 0, 0, 0)
		}
		if err != nil {
			t.Errorf("set the thread's name: %v", err)
		}
		var r reader
		b, err := h.read(&r, path)
		if err != nil {
			t.Errorf("read %s: %v", path, err)
		}
		return string(b)
	}
	var fd1, fd2 int
	tid := onThread(func() {
		if got := readAs("held-1"); got != "held-1\n" {
			t.Errorf("first read %q, want %q", got, "held-1\n")
		}
		fd1 = h.files[path].fd
		if got := readAs("held-2"); got != "held-2\n" {
			t.Errorf("read after the name changed %q, want %q", got, "held-2\n")
		}
		fd2 = h.files[path].fd
	})
	if fd1 < 0 || fd2 != fd1 {
		t.Fatalf("descriptors %d then %d: want one held descriptor read twice", fd1, fd2)
	}
	// The thread exits with its goroutine; wait until it is gone.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(tid)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d did not exit", tid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	onThread(func() {
		if got := readAs("held-3"); got != "held-3\n" {
			t.Errorf("read after the held file's thread exited %q, want %q (the path opened again)", got, "held-3\n")
		}
		if h.files[path].fd < 0 {
			t.Error("the reopened file is not held")
		}
	})
}

// TestNodeFilesPlain reads a regular file through heldFiles: it is not
// held, so a file replaced between reads is read anew.
func TestNodeFilesPlain(t *testing.T) {
	h := heldFiles{files: map[string]*heldFile{}}
	path := filepath.Join(t.TempDir(), "meminfo")
	var r reader
	for _, want := range []string{"one\n", "two\n"} {
		// A new file each time, as a test's fake tree replaces its files.
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		b, err := h.read(&r, path)
		if err != nil || string(b) != want {
			t.Fatalf("read %q, %v; want %q", b, err, want)
		}
		if f := h.files[path]; f.fd >= 0 || !f.plain {
			t.Fatalf("a regular file is held (fd %d)", f.fd)
		}
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := h.read(&r, path); !isNotExist(err) {
		t.Errorf("read of a removed file: %v, want it missing", err)
	}
}

// TestNodeFilesConcurrent reads one held procfs file from several
// goroutines at once, each with its reader (as the Providers of a fleet
// do): every read is whole.
func TestNodeFilesConcurrent(t *testing.T) {
	const path = "/proc/meminfo"
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no %s: %v", path, err)
	}
	h := heldFiles{files: map[string]*heldFile{}}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			var r reader
			for range 50 {
				b, err := h.read(&r, path)
				if err != nil || !bytes.HasPrefix(b, []byte("MemTotal:")) || !bytes.HasSuffix(b, []byte("\n")) {
					t.Errorf("read %q..., %v; want all of meminfo", b[:min(len(b), 20)], err)
					return
				}
			}
		})
	}
	wg.Wait()
	if h.files[path].fd < 0 {
		t.Error("meminfo is not held")
	}
}
