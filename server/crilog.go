package server

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

const (
	// timeFormatOut is how timestamps=true prefixes lines: RFC 3339 with
	// nanoseconds, fixed width, as the kubelet.
	timeFormatOut = "2006-01-02T15:04:05.000000000Z07:00"
	// timeFormatIn parses CRI log timestamps (variable width).
	timeFormatIn = "2006-01-02T15:04:05.999999999Z07:00"
	// followPollInterval is how often a followed log is checked for new
	// data; the container's state is checked every followStatusEvery polls.
	followPollInterval = 250 * time.Millisecond
	followStatusEvery  = 4
	logReadBufferSize  = 32 << 10
)

// logOptions are a container log request's options (v1.PodLogOptions, with
// sinceSeconds/sinceTime resolved to since).
type logOptions struct {
	tailLines  *int64
	limitBytes *int64
	since      time.Time
	follow     bool
	timestamps bool
}

var (
	errMaximumWrite = errors.New("maximum write")
	errShortWrite   = errors.New("short write")
)

// logMessage is one parsed CRI log line. log aliases the read buffer.
type logMessage struct {
	timestamp time.Time
	stream    runtimeapi.LogStreamType
	log       []byte
}

// parseCRILog parses "<RFC3339Nano> <stdout|stderr> <P|F>[:tags] <content>".
// A partial line's content has its newline trimmed; a full line's keeps it.
func parseCRILog(line []byte, msg *logMessage) error {
	idx := bytes.IndexByte(line, ' ')
	if idx < 0 {
		return errors.New("timestamp is not found")
	}
	ts, err := time.Parse(timeFormatIn, string(line[:idx]))
	if err != nil {
		return fmt.Errorf("unexpected timestamp format %q: %w", timeFormatIn, err)
	}
	msg.timestamp = ts
	line = line[idx+1:]
	idx = bytes.IndexByte(line, ' ')
	if idx < 0 {
		return errors.New("stream type is not found")
	}
	msg.stream = runtimeapi.LogStreamType(line[:idx])
	if msg.stream != runtimeapi.Stdout && msg.stream != runtimeapi.Stderr {
		return fmt.Errorf("unexpected stream type %q", msg.stream)
	}
	line = line[idx+1:]
	idx = bytes.IndexByte(line, ' ')
	if idx < 0 {
		return errors.New("log tag is not found")
	}
	tag, _, _ := bytes.Cut(line[:idx], []byte(runtimeapi.LogTagDelimiter))
	if runtimeapi.LogTag(tag) == runtimeapi.LogTagPartial && len(line) > 0 && line[len(line)-1] == '\n' {
		line = line[:len(line)-1]
	}
	msg.log = line[idx+1:]
	return nil
}

// logWriter writes parsed messages to the stream writers, applying since,
// timestamps and limitBytes, as the kubelet's.
type logWriter struct {
	stdout, stderr io.Writer
	opts           *logOptions
	remain         int64
	prefix         []byte
}

func newLogWriter(stdout, stderr io.Writer, opts *logOptions) *logWriter {
	w := &logWriter{stdout: stdout, stderr: stderr, opts: opts, remain: math.MaxInt64}
	if opts.limitBytes != nil {
		w.remain = *opts.limitBytes
	}
	return w
}

func (w *logWriter) write(msg *logMessage, addPrefix bool) error {
	if msg.timestamp.Before(w.opts.since) {
		return nil
	}
	line := msg.log
	if w.opts.timestamps && addPrefix {
		w.prefix = msg.timestamp.AppendFormat(w.prefix[:0], timeFormatOut)
		w.prefix = append(w.prefix, ' ')
		w.prefix = append(w.prefix, line...)
		line = w.prefix
	}
	if int64(len(line)) > w.remain {
		line = line[:w.remain]
	}
	var stream io.Writer
	switch msg.stream {
	case runtimeapi.Stdout:
		stream = w.stdout
	case runtimeapi.Stderr:
		stream = w.stderr
	}
	if stream == nil {
		return nil
	}
	n, err := stream.Write(line)
	w.remain -= int64(n)
	if err != nil {
		return err
	}
	if n < len(line) {
		return errShortWrite
	}
	if w.remain <= 0 {
		return errMaximumWrite
	}
	return nil
}

// rotatedLogs returns the rotated files of the log at path (path.<timestamp>
// and path.<timestamp>.gz, as the kubelet's container log manager names
// them), oldest first.
func rotatedLogs(path string) ([]string, error) {
	dir, base := filepath.Split(path)
	entries, err := os.ReadDir(filepath.Clean(dir))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasPrefix(n, base+".") || strings.HasSuffix(n, ".tmp") {
			continue
		}
		out = append(out, filepath.Join(dir, n))
	}
	slices.Sort(out) // timestamps sort chronologically
	return out, nil
}

// logSource is one file to read, from offset (plain files) or after
// skipping skipLines lines (gzipped ones).
type logSource struct {
	path      string
	gz        bool
	offset    int64
	skipLines int64
}

// tailStart finds where the last n lines of f begin: the offset, and how
// many lines start at or after it (fewer than n when the file is shorter).
// A final line without a newline counts as a line.
func tailStart(f io.ReadSeeker, n int64) (int64, int64, error) {
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, 0, err
	}
	if n <= 0 || size == 0 {
		return size, 0, nil
	}
	const block = 4096
	buf := make([]byte, block)
	var found int64
	end := size
	first := true
	for end > 0 {
		start := max(end-block, 0)
		chunk := buf[:end-start]
		if _, err := f.Seek(start, io.SeekStart); err != nil {
			return 0, 0, err
		}
		if _, err := io.ReadFull(f, chunk); err != nil {
			return 0, 0, err
		}
		i := len(chunk)
		if first {
			// The last byte ends the last line; it does not start one.
			if chunk[i-1] == '\n' {
				i--
			}
			found = 1
			first = false
		}
		for {
			j := bytes.LastIndexByte(chunk[:i], '\n')
			if j < 0 {
				break
			}
			if found == n {
				return start + int64(j) + 1, found, nil
			}
			found++
			i = j
		}
		end = start
	}
	return 0, found, nil
}

func countLines(r io.Reader) (int64, error) {
	buf := make([]byte, logReadBufferSize)
	var lines int64
	last := byte('\n')
	for {
		n, err := r.Read(buf)
		if n > 0 {
			lines += int64(bytes.Count(buf[:n], []byte{'\n'}))
			last = buf[n-1]
		}
		if err == io.EOF {
			if last != '\n' {
				lines++
			}
			return lines, nil
		}
		if err != nil {
			return lines, err
		}
	}
}

func openLog(path string, gz bool) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if !gz {
		return f, nil
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("read gzipped log %s: %w", path, err)
	}
	return struct {
		io.Reader
		io.Closer
	}{zr, f}, nil
}

// planSources decides which files to read and from where so that tail
// lines (all when tail is nil) are returned: the current log last, preceded
// by rotated ones when rotated is set.
func planSources(path string, rotated bool, tail *int64) ([]logSource, error) {
	files := []string{path}
	if rotated {
		older, err := rotatedLogs(path)
		if err != nil {
			return nil, fmt.Errorf("list rotated logs of %s: %w", path, err)
		}
		files = append(older, path)
	}
	if tail == nil {
		out := make([]logSource, len(files))
		for i, f := range files {
			out[i] = logSource{path: f, gz: strings.HasSuffix(f, ".gz")}
		}
		return out, nil
	}
	need := *tail
	var out []logSource
	for i := len(files) - 1; i >= 0 && need > 0; i-- {
		src := logSource{path: files[i], gz: strings.HasSuffix(files[i], ".gz")}
		if src.gz {
			rc, err := openLog(src.path, true)
			if err != nil {
				return nil, err
			}
			n, err := countLines(rc)
			rc.Close()
			if err != nil {
				return nil, fmt.Errorf("count lines of %s: %w", src.path, err)
			}
			if n >= need {
				src.skipLines = n - need
				need = 0
			} else {
				need -= n
			}
		} else {
			f, err := os.Open(src.path)
			if err != nil {
				if i < len(files)-1 && os.IsNotExist(err) {
					continue // rotated away meanwhile
				}
				return nil, fmt.Errorf("failed to open log file %q: %w", src.path, err)
			}
			off, n, err := tailStart(f, need)
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("failed to tail %d lines of log file %q: %w", *tail, src.path, err)
			}
			src.offset = off
			need -= n
		}
		out = append(out, src)
	}
	slices.Reverse(out)
	return out, nil
}

// logReader reads CRI log files line by line into a logWriter.
type logReader struct {
	logger    klog.Logger
	w         *logWriter
	limited   bool  // tailLines without follow: stop after remaining lines
	remaining int64 // lines left in limited mode
	isNewLine bool
	msg       logMessage
	pending   []byte // an incomplete last line, while following
}

// errStop ends reading early: tail or byte limit reached.
var errStop = errors.New("stop")

// consume parses and writes every complete line of r; a trailing
// incomplete line is written when final, else kept in pending.
func (lr *logReader) consume(r *bufio.Reader, final bool) error {
	for {
		if lr.limited && lr.remaining <= 0 {
			return errStop
		}
		line, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			lr.pending = append(lr.pending, line...)
			continue
		}
		if len(lr.pending) > 0 {
			lr.pending = append(lr.pending, line...)
			line = lr.pending
		}
		if err == io.EOF {
			if len(line) == 0 {
				return nil
			}
			if !final {
				if len(lr.pending) == 0 {
					lr.pending = append(lr.pending, line...)
				}
				return nil
			}
		} else if err != nil {
			return err
		}
		werr := lr.writeLine(line)
		lr.pending = lr.pending[:0]
		if werr != nil {
			return werr
		}
		if err == io.EOF {
			return nil
		}
	}
}

func (lr *logReader) writeLine(line []byte) error {
	if err := parseCRILog(line, &lr.msg); err != nil {
		lr.logger.Error(err, "Failed when parsing line in log file", "line", string(line))
		return nil
	}
	if err := lr.w.write(&lr.msg, lr.isNewLine); err != nil {
		if err == errMaximumWrite {
			return errStop
		}
		return err
	}
	if lr.limited {
		lr.remaining--
	}
	lr.isNewLine = len(lr.msg.log) == 0 || lr.msg.log[len(lr.msg.log)-1] == '\n'
	return nil
}

// readLogs writes the container log at path to stdout and stderr as the
// kubelet's ReadLogs, with rotated files read first when rotated is set.
// When following, it polls the current file for new data (and for
// rotation: a new file at path is read from its start once the old one is
// drained) until running reports the container stopped, ctx is done or a
// limit is reached; flush is called whenever the reader has caught up.
func readLogs(ctx context.Context, path string, opts *logOptions, rotated bool, running func(context.Context) (bool, error), clk clock.WithTicker, stdout, stderr io.Writer, flush func()) error {
	resolved, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("failed to try resolving symlinks in path %q: %v", path, err)
	}
	path = resolved
	sources, err := planSources(path, rotated, opts.tailLines)
	if err != nil {
		return err
	}
	lr := &logReader{
		logger:    klog.FromContext(ctx),
		w:         newLogWriter(stdout, stderr, opts),
		isNewLine: true,
	}
	if opts.tailLines != nil && !opts.follow {
		lr.limited, lr.remaining = true, *opts.tailLines
	}
	br := bufio.NewReaderSize(nil, logReadBufferSize)
	// Everything before the current file.
	for _, src := range sources {
		if src.path == path {
			break
		}
		rc, err := openLog(src.path, src.gz)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return fmt.Errorf("failed to open log file %q: %w", src.path, err)
		}
		if sk, ok := rc.(io.Seeker); ok && src.offset > 0 {
			if _, err := sk.Seek(src.offset, io.SeekStart); err != nil {
				rc.Close()
				return fmt.Errorf("failed to seek %d in log file %q: %w", src.offset, src.path, err)
			}
		}
		br.Reset(rc)
		err = skipLines(br, src.skipLines)
		if err == nil {
			err = lr.consume(br, true)
		}
		rc.Close()
		if err == errStop {
			return nil
		}
		if err != nil {
			return fmt.Errorf("failed to read log file %q: %w", src.path, err)
		}
	}
	var offset int64
	if n := len(sources); n > 0 && sources[n-1].path == path {
		offset = sources[n-1].offset
	} else if opts.tailLines != nil && *opts.tailLines == 0 {
		// tailLines=0 reads nothing of the current file but what follows.
		if fi, err := os.Stat(path); err == nil {
			offset = fi.Size()
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("failed to open log file %q: %v", path, err)
	}
	defer func() { f.Close() }()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return fmt.Errorf("failed to seek %d in log file %q: %w", offset, path, err)
	}
	br.Reset(f)
	if !opts.follow {
		err := lr.consume(br, true)
		if err == errStop {
			err = nil
		}
		return err
	}
	ticker := clk.NewTicker(followPollInterval)
	defer ticker.Stop()
	polls := 0
	for {
		if err := lr.consume(br, false); err != nil {
			if err == errStop {
				return nil
			}
			return fmt.Errorf("failed to read log file %q: %w", path, err)
		}
		if flush != nil {
			flush()
		}
		// Caught up. A new file at path means the current one was rotated:
		// drain it (done above) and switch. A shrunk file was truncated.
		if fi, err := os.Stat(path); err == nil {
			cur, cerr := f.Stat()
			switch {
			case cerr == nil && !os.SameFile(fi, cur):
				nf, err := os.Open(path)
				if err == nil {
					// Drain what was written to the old file before it
					// was rotated, then read the new one from its start.
					if err := lr.consume(br, true); err != nil {
						nf.Close()
						if err == errStop {
							return nil
						}
						return fmt.Errorf("failed to read log file %q: %w", path, err)
					}
					f.Close()
					f = nf
					br.Reset(f)
					continue
				}
			case cerr == nil:
				pos, perr := f.Seek(0, io.SeekCurrent)
				if perr == nil && cur.Size() < pos-int64(br.Buffered()) {
					if _, err := f.Seek(0, io.SeekStart); err == nil {
						br.Reset(f)
						lr.pending = lr.pending[:0]
						continue
					}
				}
			}
		}
		if polls%followStatusEvery == 0 {
			ok, err := running(ctx)
			if err != nil {
				return err
			}
			if !ok {
				// The container stopped: whatever it wrote is on disk.
				err := lr.consume(br, true)
				if err == errStop {
					err = nil
				}
				return err
			}
		}
		polls++
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
	}
}

func skipLines(br *bufio.Reader, n int64) error {
	for ; n > 0; n-- {
		for {
			_, err := br.ReadSlice('\n')
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil {
				return err
			}
			break
		}
	}
	return nil
}
