// Package bench measures nodekit node agents against the real control plane
// of package cluster, for cmd/nodebench: how fast a node turns Ready, how
// fast a burst of pods runs and at what CPU cost, how much memory and idle
// CPU an agent uses, how many API requests an idle node makes, and how many
// agents one process can run.
//
// Every figure is taken from outside the agent, the way an operator would
// see it, so the same code measures the upstream kubelet as an anchor:
//
//   - startup: TimeToReady, from just before the agent process starts to a
//     watch event showing the Node Ready;
//   - pods: RunBurst creates many pods at once and times each from its
//     create call, and from the watch event showing it bound to the node,
//     to the watch event showing it Running; CRITimes reads the runtime's
//     own timestamps so the runtime's share can be subtracted, and
//     SandboxRequests when containerd received each pod's RunPodSandbox
//     (its work before the sandbox's CreatedAt);
//   - resources: ReadProcStats reads VmRSS and VmHWM from /proc/<pid>
//     and the process's CPU time, to the nanosecond, from its CPU-time
//     clock (what utime+stime of /proc/<pid>/stat cuts to 10 ms steps);
//   - API traffic: ReadRequests reads a node's requests in one pass over
//     kube-apiserver's audit log, counted by verb and resource and with the
//     API server's own times (received → answered), and UnderWay
//     summarizes one kind of them (a burst's status PATCHes) and what else
//     came while they were under way;
//   - scale: StartFleet runs many complete agents (agent.Module, each on
//     its own runtime/fakecri) in this process, and WatchReady waits for
//     all of them to be Ready.
//
// Results go into a Table (metric, nodekit, target, kubelet measured in the
// same run, the brief's anchor, pass or FAIL), printed by Table.Write.
// Nothing here asserts timing: the command prints figures, tests only check
// that they are produced.
package bench
