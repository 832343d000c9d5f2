// Package cpumanager is the kubelet's CPU manager (cpuManagerPolicy).
//
// With the static policy, each container of a Guaranteed pod whose CPU
// request is a whole number gets that many CPUs of its own, picked as the
// kubelet picks them (whole NUMA nodes or sockets, then whole cores, then
// single CPUs from the fullest cores, within the NUMA affinity the
// topology manager chose); every other container runs on the shared pool,
// the CPUs nobody holds exclusively, which always includes the reserved
// CPUs (reservedSystemCPUs, or ceil(kubeReserved + systemReserved cpu)
// picked by topology). The GA policy options are implemented:
// full-pcpus-only (whole cores only, else SMTAlignmentError),
// strict-cpu-reservation (the reserved CPUs leave the shared pool) and
// prefer-align-cpus-by-uncorecache; the kubelet's beta and alpha options
// are refused at New.
//
// The flow, as the kubelet's:
//
//   - admission: the topology manager asks GetTopologyHints and then
//     Allocate for each container (Manager is a
//     topologymanager.HintProvider); a pod admitted again after a restart
//     keeps the CPUs it has;
//   - creation: ApplyContainerConfig puts the container's CPUs (exclusive,
//     or the shared pool) into its CRI LinuxContainerResources.CpusetCpus;
//   - Run: every cpuManagerReconcilePeriod (and right after an allocation
//     or a release) the CPUs of pods no longer active go back to the shared
//     pool, and every running container whose cpuset differs from what it
//     should have is updated with UpdateContainerResources.
//
// The assignments live in <root-dir>/cpu_manager_state in the kubelet's
// format (v4, with the v2 fields and checksum older kubelets read), so an
// agent that replaces a kubelet keeps its pods' CPUs, and the other way
// round; a state written for another policy stops Run, as it stops the
// kubelet. ContainerCPUs and AllocatableCPUs answer the pod resources API.
//
// The agent wires it in agent.ResourceManagers; an embedder replaces it
// with fx.Decorate of *cpumanager.Manager, or uses New alone.
package cpumanager
