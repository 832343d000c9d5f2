// Package memtrim gives back to the kernel the memory a long-running
// process touched only while it started: the pages of its own executable
// that are mapped in (text, read-only data, the pc-value tables) and the
// heap the Go runtime keeps but no longer uses.
//
// A Go binary that links client-go and the Kubernetes API types is about
// 70 MiB of text and read-only data. Package initialisation (scheme
// registrations, flag sets, protobuf descriptors), the first list of every
// informer and the first stack scans touch much of it once; the kernel maps
// each touched page and, by fault-around, its neighbours (64 KiB). Those
// pages are clean and file-backed: the kernel could drop them at no cost,
// but they count in the process's RSS until it does. Release unmaps the
// read-only mappings of the executable with madvise(MADV_DONTNEED), and
// the pages the process still uses come back on their next access: what
// is left mapped afterwards is the working set.
//
// What comes back is not one page per access. The kernel maps, on each
// fault, every page of the page cache around it (fault-around, 64 KiB) and,
// since Linux 6.18, all of a large folio: the same binary measured 21 or
// 31 MiB of file-backed RSS idle depending only on how its file came into
// the page cache (written by the linker or cp in large folios, or read back
// in small ones). So Release also marks the mappings MADV_RANDOM (a fault
// reads only its own page, no read-around) and drops the executable's
// pages that no process maps from the page cache (fdatasync, then
// posix_fadvise POSIX_FADV_DONTNEED): as the process has just unmapped
// them, that is every page of the file another process does not map. From
// then on the page cache holds what the process touched, in single pages,
// and a fault maps nothing else. Measured on the fake runtime, standalone:
// 12 MiB of the executable mapped idle instead of 21, 17 instead of 28
// with 30 pods (docs/performance.md).
//
// The price is that each page the process still uses is read from the
// file once more (a major fault) when it next touches it. Keeping in the
// page cache the pages mapped at the release would spare those reads but
// not the RSS: the kernel maps, on a fault, every cached page within the
// 64 KiB around it, MADV_RANDOM or not (Linux 6.18), so the pages touched
// only at start would be mapped again beside those still in use.
//
// Only private read-only mappings of the executable are released: they
// hold nothing the process wrote, so dropping them loses nothing. Writable
// mappings and shared libraries are left alone.
package memtrim

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
)

// Env, set to false (strconv.ParseBool) in a process's environment, keeps
// AfterStart from releasing anything.
const Env = "NODEKIT_RELEASE_STARTUP_MEMORY"

// Settle is how long AfterStart waits after the agents started: long
// enough for the first list of every informer, the node's registration and
// the first status and lease updates, which an agent does within a second
// of starting (start → Ready is 0.2-0.3 s in nodebench).
const Settle = 5 * time.Second

// AfterStart gives back what the process touched only to start its agents
// (Release) Settle after it is called, unless done closes first or Env is
// false; it blocks until then and logs the outcome with logger. It is what
// every process running nodekit agents does once they started (agent.Run
// for its one agent, agent/fleet for its many): RSS falls by a third to a
// half for one agent (docs/performance.md); the cost is one collection and
// the page faults that map back the executable's pages still in use, each
// reading its page from the file the first time.
func AfterStart(logger logr.Logger, done <-chan struct{}) {
	afterStart(logger, done, Settle, Release)
}

func afterStart(logger logr.Logger, done <-chan struct{}, settle time.Duration, release func() (Result, error)) {
	if v, ok := os.LookupEnv(Env); ok {
		release, err := strconv.ParseBool(v)
		switch {
		case err != nil:
			logger.Error(err, "Ignoring an invalid setting, releasing the startup memory as by default", "env", Env, "value", v)
		case !release:
			logger.V(2).Info("Not releasing the memory used only at startup", "env", Env)
			return
		}
	}
	select {
	case <-done:
		return
	case <-time.After(settle):
	}
	res, err := release()
	if err != nil {
		logger.Error(err, "Cannot release the memory used only at startup")
		return
	}
	logger.V(2).Info("Released the memory used only at startup", "executableMappings", res.Mappings, "executableBytes", res.Bytes)
}

// Result says what Release released.
type Result struct {
	// Mappings is the number of read-only mappings of the executable
	// released, Bytes their total size (mapped or not).
	Mappings int
	Bytes    uint64
}

// Release frees the Go heap the runtime holds unused (debug.FreeOSMemory),
// unmaps the private read-only mappings of the running executable (madvise
// MADV_DONTNEED) so that only the pages used after it count in the
// process's RSS, marks them MADV_RANDOM and drops the executable's
// unmapped pages from the page cache, so that each later fault maps one
// page instead of its neighbours or whole large folio. It is safe to call
// at any time and from any goroutine. The cost is a stop-the-world
// collection and, afterwards, one page fault per page of the executable
// the process touches again, each a read of 4 KiB from the file (from the
// disk, or the disk's own cache) the first time, and no read-ahead for
// the executable from then on (what the kernel evicts under memory
// pressure comes back a page at a time). Other processes running the same
// file keep the pages they map, and this process's faults map those
// around the page they need (fault-around), so each of several agents run
// from one file counts pages the others touched: run each from its own
// copy to keep them apart. On systems without /proc/self/maps it
// frees the heap only and returns the error.
func Release() (Result, error) {
	debug.FreeOSMemory()
	exe, ranges, err := executableMappings()
	if err != nil {
		return Result{}, fmt.Errorf("release executable pages: %w", err)
	}
	if len(ranges) == 0 {
		return Result{}, nil
	}
	// /proc/self/exe is the file mapped, even when its path was replaced.
	f, err := os.Open("/proc/self/exe")
	if err != nil {
		return Result{}, fmt.Errorf("release executable pages of %s: %w", exe, err)
	}
	defer f.Close()
	// The kernel keeps a dirty page cached: write out an executable just
	// written by the linker or cp (the write happens anyway within the
	// kernel's writeback delay, 30 s by default) before unmapping, so that
	// the process maps back as little as possible before its pages are
	// dropped. Its error is not one: a file system without fsync
	// (squashfs) or mounted read-only holds no dirty page of it anyway.
	_ = unix.Fdatasync(int(f.Fd()))
	var res Result
	for _, r := range ranges {
		// MADV_RANDOM first: a page touched between the two calls is read
		// alone already.
		for _, advice := range []int{unix.MADV_RANDOM, unix.MADV_DONTNEED} {
			if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r.start, r.end-r.start, uintptr(advice)); errno != 0 {
				return res, fmt.Errorf("release executable pages of %s at %#x: madvise(%d): %w", exe, r.start, advice, errno)
			}
		}
		res.Mappings++
		res.Bytes += uint64(r.end - r.start)
	}
	// Drop the pages no process maps now from the page cache.
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return res, fmt.Errorf("release executable pages of %s: posix_fadvise(POSIX_FADV_DONTNEED): %w", exe, err)
	}
	return res, nil
}

// ExecutableSize is the size of the running executable's private read-only
// mappings (its text, read-only data and pc-value tables): at most what its
// pages add to the process's RSS, which the Go runtime's memory accounting
// (and so its memory limit) does not count.
func ExecutableSize() (uint64, error) {
	_, ranges, err := executableMappings()
	if err != nil {
		return 0, fmt.Errorf("executable size: %w", err)
	}
	var size uint64
	for _, r := range ranges {
		size += uint64(r.end - r.start)
	}
	return size, nil
}

// executableMappings returns the running executable's path and its private
// read-only mappings, from /proc/self/maps.
func executableMappings() (string, []mapping, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	maps, err := os.Open("/proc/self/maps")
	if err != nil {
		return exe, nil, err
	}
	defer maps.Close()
	ranges, err := readOnlyMappings(maps, exe)
	if err != nil {
		return exe, nil, fmt.Errorf("%s: %w", exe, err)
	}
	return exe, ranges, nil
}

// mapping is one address range of /proc/self/maps.
type mapping struct{ start, end uintptr }

// readOnlyMappings returns the private mappings of path that are neither
// writable nor shared, from a /proc/<pid>/maps listing. A path replaced on
// disk while the process runs is listed with " (deleted)" appended (and
// os.Executable strips it); its mappings still count.
func readOnlyMappings(r io.Reader, path string) ([]mapping, error) {
	var out []mapping
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// start-end perms offset dev inode path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		if name := strings.Join(fields[5:], " "); name != path && name != path+" (deleted)" {
			continue
		}
		perms := fields[1]
		if len(perms) != 4 || perms[1] == 'w' || perms[3] != 'p' || perms[0] != 'r' {
			continue
		}
		start, end, ok := bytes.Cut([]byte(fields[0]), []byte("-"))
		if !ok {
			return nil, fmt.Errorf("malformed maps line %q", sc.Text())
		}
		s, err := strconv.ParseUint(string(start), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("malformed maps line %q: %w", sc.Text(), err)
		}
		e, err := strconv.ParseUint(string(end), 16, 64)
		if err != nil || e <= s {
			return nil, fmt.Errorf("malformed maps line %q", sc.Text())
		}
		out = append(out, mapping{start: uintptr(s), end: uintptr(e)})
	}
	return out, sc.Err()
}
