// Command pause is the sandbox ("infra") container of the e2e images: it
// holds a pod's namespaces open, does nothing else, and exits 0 on SIGTERM or
// SIGINT. Running as PID 1 of a pod that shares its process namespace, it
// reaps the zombies the pod's other processes leave behind, as the upstream
// pause container does.
//
// It is built statically (CGO_ENABLED=0) by the e2e harness and packed into
// an image together with nothing else.
package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	os.Exit(run(os.Args[1:], signals, os.Stderr))
}

// run waits for signals: it reaps children on SIGCHLD and returns the exit
// status 0 on anything else (SIGTERM, SIGINT). Arguments are an error
// (status 2).
func run(args []string, signals <-chan os.Signal, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "usage: pause (takes no arguments; exits on SIGTERM or SIGINT)")
		return 2
	}
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			return 0
		}
		reap()
	}
	return 0
}

// reap collects every exited child without blocking; SIGCHLD signals
// coalesce, so one signal may stand for several children.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
