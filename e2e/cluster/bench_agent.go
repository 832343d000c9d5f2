package cluster

import "errors"

// PID returns the process id of the running agent, for reading its
// /proc/<pid> figures (RSS, CPU time); 0 when it is not running.
func (a *Agent) PID() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.proc == nil || a.proc.exited() {
		return 0
	}
	return a.proc.pid()
}

// StopTimedOut reports whether err, from Agent.Stop, says the agent ignored
// SIGTERM and had to be killed (rather than exiting with a non-zero status).
func StopTimedOut(err error) bool { return errors.Is(err, errTimeout) }
