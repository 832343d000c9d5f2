package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one child program the harness started: a control-plane server,
// containerd or a node agent. Its output (stdout and stderr) is appended to a
// log file so restarts of the same component share one log.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
}

// spawnRequests is served by one goroutine locked to its OS thread for the
// life of the test process. Children get SIGKILL through Pdeathsig when the
// thread that started them exits; starting them all from a thread that never
// exits means they die only with the harness process itself, never because
// the Go runtime retired some thread.
var (
	spawnOnce     sync.Once
	spawnRequests chan spawnRequest
)

type spawnRequest struct {
	cmd    *exec.Cmd
	result chan error
}

func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnRequests = make(chan spawnRequest)
		go func() {
			runtime.LockOSThread()
			for req := range spawnRequests {
				req.result <- req.cmd.Start()
			}
		}()
	})
	result := make(chan error, 1)
	spawnRequests <- spawnRequest{cmd: cmd, result: result}
	return <-result
}

// startProcess runs path with args, appending its output to logPath. The child
// gets its own process group (a terminal's Ctrl-C reaches only the harness,
// which then stops children in order) and is killed if the harness dies.
func startProcess(name, logPath, path string, args []string, env []string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: open log: %w", name, err)
	}
	fmt.Fprintf(logFile, "==== %s: %s %s\n", time.Now().Format(time.RFC3339), path, strings.Join(args, " "))
	cmd := exec.Command(path, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := spawn(cmd); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, path, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// pid returns the child's process id.
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the child has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitErr describes how the child exited; call only after exited() is true.
func (p *process) exitErr() error {
	if p.waitErr != nil {
		return fmt.Errorf("%s (pid %d) exited: %w; log %s", p.name, p.pid(), p.waitErr, p.logPath)
	}
	return fmt.Errorf("%s (pid %d) exited with status 0; log %s", p.name, p.pid(), p.logPath)
}

// errTimeout is wrapped by stop when the child ignored SIGTERM.
var errTimeout = errors.New("did not exit after SIGTERM")

// stop sends SIGTERM, waits up to grace for the child to exit and SIGKILLs it
// after that. It returns the child's exit error (nil for status 0), wrapped
// with errTimeout if it had to be killed. Calling stop on an exited process
// returns how it exited.
func (p *process) stop(grace time.Duration) error {
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = p.cmd.Process.Kill()
			<-p.done
			return fmt.Errorf("%s (pid %d) %w within %s, killed; log %s", p.name, p.pid(), errTimeout, grace, p.logPath)
		}
	}
	if p.waitErr != nil {
		return fmt.Errorf("%s (pid %d): %w; log %s", p.name, p.pid(), p.waitErr, p.logPath)
	}
	return nil
}

// kill SIGKILLs the child and waits for it.
func (p *process) kill() {
	if !p.exited() {
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}

// LogTail returns the last n lines of a log file, for error messages; a
// file it cannot read yields a note saying so.
func LogTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	data = bytes.TrimRight(data, "\n")
	lines := bytes.Split(data, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// runCommand runs a short-lived command to completion and returns its
// combined output; the error includes that output.
func runCommand(ctx context.Context, dir string, env []string, out io.Writer, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var buf bytes.Buffer
	if out != nil {
		cmd.Stdout = io.MultiWriter(&buf, out)
	} else {
		cmd.Stdout = &buf
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Run(); err != nil {
		return buf.Bytes(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, strings.TrimSpace(lastLines(buf.String(), 40)))
	}
	return buf.Bytes(), nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
