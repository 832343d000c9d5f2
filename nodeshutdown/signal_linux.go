package nodeshutdown

import "syscall"

// DefaultSignal is the signal the agent takes as a node shutdown where no
// systemd-logind runs: SIGPWR, the power-failure signal that init systems
// pass on (LXC halts a container's init with it, systemd's sigpwr.target,
// sysvinit's powerfail). SIGTERM keeps meaning "stop the agent and leave
// the containers running".
const DefaultSignal = syscall.SIGPWR
