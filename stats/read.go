package stats

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// reader reads small kernel files (cgroup control files, procfs) into one
// reused buffer, so a stats round allocates little. It is not safe for
// concurrent use: the Provider uses it only while it holds its round lock,
// and releases its buffer when the round ends.
type reader struct {
	buf []byte
}

// readBufs holds the readers' buffers between their rounds: an agent reads
// its stats for a few milliseconds every few seconds, so the agents of a
// process (a fleet's thousand) share a few buffers instead of keeping 8 KiB
// each.
var readBufs = sync.Pool{New: func() any {
	b := make([]byte, 8<<10)
	return &b
}}

// release gives r's buffer back for other readers; what r read before is
// invalid after it. r takes a buffer again on its next read.
func (r *reader) release() {
	if r.buf == nil {
		return
	}
	b := r.buf
	r.buf = nil
	readBufs.Put(&b)
}

// maxFileSize bounds what read accepts; the files read here are a few KiB
// (memory.stat, /proc/net/dev of a host with many interfaces).
const maxFileSize = 1 << 20

// read returns the content of path, opened for this read alone. The slice
// is valid until the next call. It uses the system calls directly:
// os.Open would also try to register every file with the network poller,
// a wasted system call per file.
func (r *reader) read(path string) ([]byte, error) {
	fd, err := openRetry(path, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	return r.readFd(fd, path)
}

// readFile is read for a file of the node itself when node is set: a
// file read every round as long as the host runs (the root cgroup's
// control files, the node's procfs files). Such a file, when it is on one
// of the kernel's pseudo filesystems, is kept open after its first read
// and read again from offset 0 (see nodeFiles), which spares the path
// walk, open and close of each round; any other file (a test's fake tree)
// is read as read does.
func (r *reader) readFile(path string, node bool) ([]byte, error) {
	if node {
		return nodeFiles.read(r, path)
	}
	return r.read(path)
}

// readFd reads fd from offset 0 to its end into r.buf (pread: a file kept
// open is read again from its start; the kernel regenerates a pseudo
// file's content on every read at offset 0).
func (r *reader) readFd(fd int, path string) ([]byte, error) {
	if r.buf == nil {
		r.buf = *readBufs.Get().(*[]byte)
	}
	n := 0
	for {
		if n == len(r.buf) {
			if len(r.buf) >= maxFileSize {
				return nil, fmt.Errorf("read %s: larger than %d bytes", path, maxFileSize)
			}
			grown := make([]byte, 2*len(r.buf))
			copy(grown, r.buf[:n])
			r.buf = grown
		}
		m, err := unix.Pread(fd, r.buf[n:], int64(n))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			return r.buf[:n], nil
		}
		n += m
	}
}

// openRetry opens path, retrying when a signal interrupts the call.
func openRetry(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, flags, 0)
		if !errors.Is(err, unix.EINTR) {
			return fd, err
		}
	}
}

// nodeFiles are the node files (reader.readFile) held open, one
// descriptor per path for the whole process: every Provider of a process
// (the agents of a fleet) reads the same host, so a fleet holds as many
// descriptors as one agent — about ten (procfs: meminfo, loadavg,
// kernel.pid_max and threads-max, 1/net/dev; the root cgroup's CPU and
// memory files). The set is bounded by the distinct node paths read, and
// nothing below the root cgroup is held: a pod's cgroup, removed with the
// pod, is opened for each read.
var nodeFiles = heldFiles{files: map[string]*heldFile{}}

// heldFiles keeps files of the kernel's pseudo filesystems open between
// reads. Safe for concurrent use.
type heldFiles struct {
	mu    sync.Mutex
	files map[string]*heldFile
}

// heldFile is one path of heldFiles. mu serializes its reads (one
// descriptor, read from offset 0 each time) and guards fd.
type heldFile struct {
	mu sync.Mutex
	// fd is the open descriptor, -1 when none is held: before the first
	// read, after a read failed, and always for a file not on a pseudo
	// filesystem (plain is then set).
	fd    int
	plain bool
}

// read reads path into r's buffer through its held descriptor, opening
// it when none is held. A held descriptor whose read fails is closed and
// the path opened again, once: a file that was removed and made anew (a
// cgroup recreated) is read at its new place, and an error that persists
// is the one a fresh open and read return.
func (h *heldFiles) read(r *reader, path string) ([]byte, error) {
	h.mu.Lock()
	f := h.files[path]
	if f == nil {
		f = &heldFile{fd: -1}
		h.files[path] = f
	}
	h.mu.Unlock()

	f.mu.Lock()
	defer f.mu.Unlock()
	if f.plain {
		return r.read(path)
	}
	if f.fd >= 0 {
		if b, err := r.readFd(f.fd, path); err == nil {
			return b, nil
		}
		unix.Close(f.fd)
		f.fd = -1
	}
	fd, err := openRetry(path, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	b, err := r.readFd(fd, path)
	if err != nil || !onPseudoFS(fd) {
		f.plain = err == nil
		unix.Close(fd)
		return b, err
	}
	f.fd = fd
	return b, nil
}

// readUint reads a file holding one unsigned number (as readFile does);
// "max" is math.MaxUint64, as the kernel writes an unlimited cgroup v2
// value.
func (r *reader) readUint(path string, node bool) (uint64, error) {
	b, err := r.readFile(path, node)
	if err != nil {
		return 0, err
	}
	v, err := parseUint(bytes.TrimSpace(b))
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return v, nil
}

// parseUint parses a decimal unsigned number, or "max". A negative number
// (cgroup v1 writes -1 for some unlimited values) is unlimited too.
func parseUint(b []byte) (uint64, error) {
	if string(b) == "max" || (len(b) > 0 && b[0] == '-') {
		return unlimited, nil
	}
	v, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", b)
	}
	return v, nil
}

// eachLine calls f with every non-empty line of b, without its newline.
func eachLine(b []byte, f func(line []byte)) {
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if len(line) > 0 {
			f(line)
		}
	}
}

// appendFields appends to dst the fields of b, split around runs of
// spaces and tabs, as bytes.Fields splits them but without a slice of its
// own: with a dst of enough capacity (an array of the caller's) a line of
// a procfs table is split without allocating.
func appendFields(dst [][]byte, b []byte) [][]byte {
	start := -1
	for i, c := range b {
		if c == ' ' || c == '\t' {
			if start >= 0 {
				dst = append(dst, b[start:i])
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		dst = append(dst, b[start:])
	}
	return dst
}

// keyValue splits a "key value" line (memory.stat, cpu.stat).
func keyValue(line []byte) (key []byte, value uint64, ok bool) {
	i := bytes.IndexByte(line, ' ')
	if i <= 0 {
		return nil, 0, false
	}
	v, err := strconv.ParseUint(string(bytes.TrimSpace(line[i+1:])), 10, 64)
	if err != nil {
		return nil, 0, false
	}
	return line[:i], v, true
}

// isNotExist reports whether err says a file or directory is missing.
func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist)
}
