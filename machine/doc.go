// Package machine reads the facts about the host a node reports: its CPUs
// (online ∩ this process's cpuset), memory and swap, huge page sizes, the
// size of the filesystem holding the node's root directory, the machine ID,
// system UUID and boot ID, the kernel release and OS image, and whether the
// agent runs in a user namespace. The kubelet gets them from cAdvisor;
// nodekit reads them from /proc, /sys and statfs, under the directories
// given in Roots, so a test or a containerised agent can point it
// elsewhere.
//
// This is the one place they are read. The agent builds one Func (Cached
// of Read) and gives it to everything that needs the host: the node
// status (status.SetterOptions.Machine: capacity, allocatable and
// nodeInfo), the kubepods cgroup's limits and the machine_* series of
// /metrics/cadvisor (stats.CadvisorOptions.Machine). An embedder
// simulating a node replaces that Func (fx.Decorate of machine.Func) and
// every consumer sees the simulated host.
package machine
