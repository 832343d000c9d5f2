package stats

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strconv"

	"golang.org/x/sys/unix"
)

// reader reads small kernel files (cgroup control files, procfs) into one
// reused buffer, so a stats round allocates little. It is not safe for
// concurrent use: the Provider uses it only while it holds its round lock.
type reader struct {
	buf []byte
}

// maxFileSize bounds what read accepts; the files read here are a few KiB
// (memory.stat, /proc/net/dev of a host with many interfaces).
const maxFileSize = 1 << 20

// read returns the content of path. The slice is valid until the next call.
// It uses the system calls directly: os.Open would also try to register
// every file with the network poller, a wasted system call per file.
func (r *reader) read(path string) ([]byte, error) {
	fd, err := openRetry(path, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	if r.buf == nil {
		r.buf = make([]byte, 8<<10)
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
		m, err := unix.Read(fd, r.buf[n:])
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

// readUint reads a file holding one unsigned number; "max" is
// math.MaxUint64, as the kernel writes an unlimited cgroup v2 value.
func (r *reader) readUint(path string) (uint64, error) {
	b, err := r.read(path)
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
