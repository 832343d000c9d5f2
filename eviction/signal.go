package eviction

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// The kubelet's eviction signals (pkg/kubelet/eviction/api/types.go).
const (
	// SignalMemoryAvailable is the node's memory capacity minus its working
	// set, in bytes.
	SignalMemoryAvailable = "memory.available"
	// SignalAllocatableMemoryAvailable is the pods' memory limit (the
	// kubepods cgroup) minus the pods' working set, in bytes.
	SignalAllocatableMemoryAvailable = "allocatableMemory.available"
	// SignalNodeFsAvailable is free space on the kubelet's filesystem
	// (root dir: volumes, logs), in bytes.
	SignalNodeFsAvailable = "nodefs.available"
	// SignalNodeFsInodesFree is free inodes on the kubelet's filesystem.
	SignalNodeFsInodesFree = "nodefs.inodesFree"
	// SignalImageFsAvailable is free space on the runtime's image
	// filesystem, in bytes.
	SignalImageFsAvailable = "imagefs.available"
	// SignalImageFsInodesFree is free inodes on the image filesystem.
	SignalImageFsInodesFree = "imagefs.inodesFree"
	// SignalContainerFsAvailable is free space on the filesystem of the
	// containers' writable layers, in bytes. Its thresholds follow nodefs
	// or imagefs by the disk layout.
	SignalContainerFsAvailable = "containerfs.available"
	// SignalContainerFsInodesFree is free inodes on the writable layers'
	// filesystem.
	SignalContainerFsInodesFree = "containerfs.inodesFree"
	// SignalPIDAvailable is the node's PID limit minus its running
	// processes.
	SignalPIDAvailable = "pid.available"
)

// The starved resources the kubelet names for inode and PID signals (memory
// and disk space use v1.ResourceMemory and v1.ResourceEphemeralStorage).
const (
	ResourceInodes v1.ResourceName = "inodes"
	ResourcePIDs   v1.ResourceName = "pids"
)

// Observation is one reading of a signal: how much is available out of
// Capacity, in the signal's unit, and when the stats behind it were taken.
// A zero Time means "always fresh": the manager never treats the reading
// as stale.
type Observation struct {
	Available, Capacity int64
	Time                metav1.Time
}

// ObserveFunc derives a signal's observation from a summary; ok is false
// when the summary lacks the stats (the signal's thresholds are then not
// evaluated). It must not modify or retain summary.
type ObserveFunc func(summary *statsapi.Summary) (obs Observation, ok bool)

// ReclaimFunc frees a node-level resource without evicting pods, e.g. by
// deleting unused containers or images. It blocks until done.
type ReclaimFunc func(ctx context.Context) error

// Signal is one eviction signal: how to observe it and what to do when its
// thresholds are met. The built-in signals are the kubelet's; an embedder
// adds its own (or replaces a built-in one, by Name) with Options.Signals.
type Signal struct {
	// Name is the signal's name as thresholds spell it ("memory.available").
	Name string
	// Resource is the starved resource named in events and eviction
	// messages, and used to find the usage of each container in them.
	Resource v1.ResourceName
	// Format prints amounts of Resource in messages; zero means
	// resource.DecimalSI.
	Format resource.Format
	// Condition is the node condition the signal's thresholds set (e.g.
	// MemoryPressure); empty sets none.
	Condition v1.NodeConditionType
	// Observe reads the signal. Required.
	Observe ObserveFunc
	// Reclaim runs in order before any pod is evicted for this signal; the
	// manager then re-measures and evicts only if a threshold is still met.
	Reclaim []ReclaimFunc
	// Rank orders pods for eviction, first evicted first. Nil: a met
	// threshold sets Condition and is reported, but evicts no pod.
	Rank RankFunc
}

func (s *Signal) format() resource.Format {
	if s.Format == "" {
		return resource.DecimalSI
	}
	return s.Format
}

// DiskLayout says which of the runtime's filesystems are separate devices
// from the kubelet's (nodefs). It decides the containerfs thresholds, which
// pod usage counts toward each disk signal, and what node-level reclaim
// runs.
type DiskLayout struct {
	// DedicatedImageFs: images live on a filesystem other than nodefs.
	DedicatedImageFs bool
	// SplitContainerFs: the containers' writable layers live on a
	// filesystem other than images (KubeletSeparateDiskGC), i.e. on nodefs.
	SplitContainerFs bool
}

var builtinSignalNames = []string{
	SignalMemoryAvailable, SignalAllocatableMemoryAvailable,
	SignalNodeFsAvailable, SignalNodeFsInodesFree,
	SignalImageFsAvailable, SignalImageFsInodesFree,
	SignalContainerFsAvailable, SignalContainerFsInodesFree,
	SignalPIDAvailable,
}

func isBuiltinSignal(name string) bool {
	for _, n := range builtinSignalNames {
		if n == name {
			return true
		}
	}
	return false
}

// ObserveMemoryAvailable is memory.available as the kubelet computes it on
// Linux: available is Node.Memory.AvailableBytes, capacity is available
// plus the node's working set.
func ObserveMemoryAvailable(s *statsapi.Summary) (Observation, bool) {
	return memoryObservation(s.Node.Memory)
}

func memoryObservation(m *statsapi.MemoryStats) (Observation, bool) {
	if m == nil || m.AvailableBytes == nil || m.WorkingSetBytes == nil {
		return Observation{}, false
	}
	return Observation{
		Available: int64(*m.AvailableBytes),
		Capacity:  int64(*m.AvailableBytes + *m.WorkingSetBytes),
		Time:      m.Time,
	}, true
}

// ObserveAllocatableMemoryAvailable returns allocatableMemory.available: as
// the kubelet, from the "pods" system container's memory (its AvailableBytes
// is the kubepods cgroup's limit minus its working set). When the stats
// provider gives the pods container a working set but no AvailableBytes,
// and podsMemoryLimit is not nil, available is podsMemoryLimit() minus that
// working set and the capacity is the limit.
func ObserveAllocatableMemoryAvailable(podsMemoryLimit func() (int64, bool)) ObserveFunc {
	return func(s *statsapi.Summary) (Observation, bool) {
		var pods *statsapi.ContainerStats
		for i := range s.Node.SystemContainers {
			if s.Node.SystemContainers[i].Name == statsapi.SystemContainerPods {
				pods = &s.Node.SystemContainers[i]
				break
			}
		}
		if pods == nil || pods.Memory == nil {
			return Observation{}, false
		}
		if obs, ok := memoryObservation(pods.Memory); ok {
			return obs, true
		}
		if podsMemoryLimit == nil || pods.Memory.WorkingSetBytes == nil {
			return Observation{}, false
		}
		limit, ok := podsMemoryLimit()
		if !ok {
			return Observation{}, false
		}
		return Observation{
			Available: limit - int64(*pods.Memory.WorkingSetBytes),
			Capacity:  limit,
			Time:      pods.Memory.Time,
		}, true
	}
}

// fsBytes and fsInodes observe one filesystem's space or inodes.
func fsBytes(fs *statsapi.FsStats) (Observation, bool) {
	if fs == nil || fs.AvailableBytes == nil || fs.CapacityBytes == nil {
		return Observation{}, false
	}
	return Observation{Available: int64(*fs.AvailableBytes), Capacity: int64(*fs.CapacityBytes), Time: fs.Time}, true
}

func fsInodes(fs *statsapi.FsStats) (Observation, bool) {
	if fs == nil || fs.InodesFree == nil || fs.Inodes == nil {
		return Observation{}, false
	}
	return Observation{Available: int64(*fs.InodesFree), Capacity: int64(*fs.Inodes), Time: fs.Time}, true
}

func imageFs(s *statsapi.Summary) *statsapi.FsStats {
	if s.Node.Runtime == nil {
		return nil
	}
	return s.Node.Runtime.ImageFs
}

func containerFs(s *statsapi.Summary) *statsapi.FsStats {
	if s.Node.Runtime == nil {
		return nil
	}
	return s.Node.Runtime.ContainerFs
}

// ObservePIDAvailable is pid.available: Rlimit.MaxPID minus
// Rlimit.NumOfRunningProcesses, out of MaxPID.
func ObservePIDAvailable(s *statsapi.Summary) (Observation, bool) {
	r := s.Node.Rlimit
	if r == nil || r.MaxPID == nil || r.NumOfRunningProcesses == nil {
		return Observation{}, false
	}
	return Observation{Available: *r.MaxPID - *r.NumOfRunningProcesses, Capacity: *r.MaxPID, Time: r.Time}, true
}

// builtinSignals returns the kubelet's signals for layout: observations
// from the summary, and the ranking and node-level reclaim the kubelet
// picks for each disk signal by layout.
func builtinSignals(layout DiskLayout, podsMemoryLimit func() (int64, bool), containerGC, imageGC ReclaimFunc) []Signal {
	rankMemory := rankByUsage(memoryUsage)
	sigs := []Signal{
		{Name: SignalMemoryAvailable, Resource: v1.ResourceMemory, Format: resource.BinarySI, Condition: v1.NodeMemoryPressure,
			Observe: ObserveMemoryAvailable, Rank: rankMemory},
		{Name: SignalAllocatableMemoryAvailable, Resource: v1.ResourceMemory, Format: resource.BinarySI, Condition: v1.NodeMemoryPressure,
			Observe: ObserveAllocatableMemoryAvailable(podsMemoryLimit), Rank: rankMemory},
		{Name: SignalPIDAvailable, Resource: ResourcePIDs, Format: resource.DecimalSI, Condition: v1.NodePIDPressure,
			Observe: ObservePIDAvailable, Rank: rankPIDPressure},
	}

	// What each disk signal's pods use, and what reclaim runs, by layout
	// (the kubelet's buildSignalToRankFunc / buildSignalToNodeReclaimFuncs).
	var nodefsUse, imagefsUse, containerfsUse fsUse
	var nodefsGC, imagefsGC, containerfsGC []ReclaimFunc
	both := compactReclaim(containerGC, imageGC)
	switch {
	case layout.DedicatedImageFs && !layout.SplitContainerFs:
		nodefsUse = fsUse{logs: true, localVolumes: true}
		imagefsUse = fsUse{rootfs: true}
		containerfsUse = imagefsUse
		imagefsGC, containerfsGC = both, both
	case layout.DedicatedImageFs && layout.SplitContainerFs:
		nodefsUse = fsUse{logs: true, localVolumes: true, rootfs: true}
		containerfsUse = nodefsUse
		imagefsUse = fsUse{}
		imagefsGC = compactReclaim(imageGC)
		nodefsGC = compactReclaim(containerGC)
		containerfsGC = nodefsGC
	default:
		nodefsUse = fsUse{logs: true, localVolumes: true, rootfs: true}
		imagefsUse, containerfsUse = nodefsUse, nodefsUse
		nodefsGC, imagefsGC, containerfsGC = both, both, both
	}
	disk := func(name string, bytes bool, use fsUse, gc []ReclaimFunc, observe ObserveFunc) Signal {
		s := Signal{Name: name, Condition: v1.NodeDiskPressure, Observe: observe, Reclaim: gc}
		if bytes {
			s.Resource, s.Format = v1.ResourceEphemeralStorage, resource.BinarySI
		} else {
			s.Resource, s.Format = ResourceInodes, resource.DecimalSI
		}
		s.Rank = rankDiskPressure(use, s.Resource)
		return s
	}
	return append(sigs,
		disk(SignalNodeFsAvailable, true, nodefsUse, nodefsGC, func(s *statsapi.Summary) (Observation, bool) { return fsBytes(s.Node.Fs) }),
		disk(SignalNodeFsInodesFree, false, nodefsUse, nodefsGC, func(s *statsapi.Summary) (Observation, bool) { return fsInodes(s.Node.Fs) }),
		disk(SignalImageFsAvailable, true, imagefsUse, imagefsGC, func(s *statsapi.Summary) (Observation, bool) { return fsBytes(imageFs(s)) }),
		disk(SignalImageFsInodesFree, false, imagefsUse, imagefsGC, func(s *statsapi.Summary) (Observation, bool) { return fsInodes(imageFs(s)) }),
		disk(SignalContainerFsAvailable, true, containerfsUse, containerfsGC, func(s *statsapi.Summary) (Observation, bool) { return fsBytes(containerFs(s)) }),
		disk(SignalContainerFsInodesFree, false, containerfsUse, containerfsGC, func(s *statsapi.Summary) (Observation, bool) { return fsInodes(containerFs(s)) }),
	)
}

func compactReclaim(fns ...ReclaimFunc) []ReclaimFunc {
	var out []ReclaimFunc
	for _, f := range fns {
		if f != nil {
			out = append(out, f)
		}
	}
	return out
}

// InferDiskLayout guesses the disk layout from a summary when no
// DiskLayoutFunc is given: the image filesystem is dedicated when its
// capacity or inode count differs from nodefs's, and writable layers are
// split when the container filesystem's differ from the image filesystem's.
// ok is false when the summary lacks the stats to tell (nodefs or imagefs
// capacity); the manager then assumes one filesystem and asks again on the
// next pass. Two distinct filesystems of identical size and inode count
// look like one; give Options.DiskLayout when that matters.
func InferDiskLayout(s *statsapi.Summary) (layout DiskLayout, ok bool) {
	node, img := s.Node.Fs, imageFs(s)
	if node == nil || img == nil || node.CapacityBytes == nil || img.CapacityBytes == nil {
		return DiskLayout{}, false
	}
	layout.DedicatedImageFs = !sameFs(node, img)
	if cfs := containerFs(s); cfs != nil && cfs.CapacityBytes != nil {
		layout.SplitContainerFs = !sameFs(cfs, img)
	}
	return layout, true
}

func sameFs(a, b *statsapi.FsStats) bool {
	if *a.CapacityBytes != *b.CapacityBytes {
		return false
	}
	if a.Inodes != nil && b.Inodes != nil && *a.Inodes != *b.Inodes {
		return false
	}
	return true
}
