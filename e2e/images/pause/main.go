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
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: pause (takes no arguments; exits on SIGTERM or SIGINT)")
		os.Exit(2)
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
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
