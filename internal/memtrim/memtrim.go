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
// read-only mappings of the executable with madvise(MADV_DONTNEED): the pages
// stay in the page cache, and the ones the process still uses come back on
// their next access with a minor fault (no disk read while the page cache
// holds them). What is left mapped afterwards is the working set.
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
	"syscall"
)

// Result says what Release released.
type Result struct {
	// Mappings is the number of read-only mappings of the executable
	// released, Bytes their total size (mapped or not).
	Mappings int
	Bytes    uint64
}

// Release frees the Go heap the runtime holds unused (debug.FreeOSMemory)
// and unmaps the private read-only mappings of the running executable
// (madvise MADV_DONTNEED), so that only the pages used after it count in
// the process's RSS. It is safe to call at any time and from any goroutine;
// the cost is a stop-the-world collection and, afterwards, one minor page
// fault per 64 KiB of the executable the process touches again. On systems
// without /proc/self/maps it frees the heap only and returns the error.
func Release() (Result, error) {
	debug.FreeOSMemory()
	exe, err := os.Executable()
	if err != nil {
		return Result{}, fmt.Errorf("release executable pages: %w", err)
	}
	maps, err := os.Open("/proc/self/maps")
	if err != nil {
		return Result{}, fmt.Errorf("release executable pages: %w", err)
	}
	defer maps.Close()
	ranges, err := readOnlyMappings(maps, exe)
	if err != nil {
		return Result{}, fmt.Errorf("release executable pages of %s: %w", exe, err)
	}
	var res Result
	for _, r := range ranges {
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, r.start, r.end-r.start, syscall.MADV_DONTNEED); errno != 0 {
			return res, fmt.Errorf("release executable pages of %s at %#x: madvise: %w", exe, r.start, errno)
		}
		res.Mappings++
		res.Bytes += uint64(r.end - r.start)
	}
	return res, nil
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
