//go:build unix && !linux

package nodeshutdown

import "syscall"

// DefaultSignal is the signal the agent takes as a node shutdown where no
// systemd-logind runs. There is no SIGPWR here: SIGUSR2.
const DefaultSignal = syscall.SIGUSR2
