package fakecri

import (
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// writableLayerBytes is the writable layer usage every container reports.
const writableLayerBytes = 32 << 10

// containerStatsLocked returns c's stats at now: a running container uses
// its behavior's CPU and memory; a stopped one reports only its writable
// layer, as containerd does.
func (s *Server) containerStatsLocked(c *container, now time.Time) *runtimeapi.ContainerStats {
	ts := now.UnixNano()
	st := &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{
			Id:          c.id,
			Metadata:    clone(c.config.GetMetadata()),
			Labels:      copyMap(c.config.GetLabels()),
			Annotations: copyMap(c.config.GetAnnotations()),
		},
		WritableLayer: &runtimeapi.FilesystemUsage{
			Timestamp:  ts,
			FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: s.mountpoint},
			UsedBytes:  &runtimeapi.UInt64Value{Value: writableLayerBytes},
			InodesUsed: &runtimeapi.UInt64Value{Value: 8},
		},
	}
	if c.state != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return st
	}
	cpu, mem := c.behavior.CPU, c.behavior.Memory
	if cpu == 0 {
		cpu = DefaultContainerCPU
	}
	if mem == 0 {
		mem = DefaultContainerMemory
	}
	ran := max(now.UnixNano()-c.startedAt, 0)
	st.Cpu = &runtimeapi.CpuUsage{
		Timestamp:            ts,
		UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: uint64(ran) * uint64(cpu) / 1000},
		UsageNanoCores:       &runtimeapi.UInt64Value{Value: uint64(cpu) * 1e6},
	}
	st.Memory = &runtimeapi.MemoryUsage{
		Timestamp:       ts,
		WorkingSetBytes: &runtimeapi.UInt64Value{Value: uint64(mem)},
		UsageBytes:      &runtimeapi.UInt64Value{Value: uint64(mem)},
		RssBytes:        &runtimeapi.UInt64Value{Value: uint64(mem)},
		AvailableBytes:  &runtimeapi.UInt64Value{Value: 0},
		PageFaults:      &runtimeapi.UInt64Value{Value: 0},
		MajorPageFaults: &runtimeapi.UInt64Value{Value: 0},
	}
	return st
}

func (s *Server) listContainerStats(f *runtimeapi.ContainerStatsFilter) []*runtimeapi.ContainerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	now := s.clock.Now()
	var cs []*container
	for _, c := range s.containers {
		if f.GetId() != "" && !strings.HasPrefix(c.id, f.GetId()) {
			continue
		}
		if f.GetPodSandboxId() != "" && !strings.HasPrefix(c.sandboxID, f.GetPodSandboxId()) {
			continue
		}
		if !matchLabels(c.config.GetLabels(), f.GetLabelSelector()) {
			continue
		}
		cs = append(cs, c)
	}
	sortContainers(cs)
	out := make([]*runtimeapi.ContainerStats, len(cs))
	for i, c := range cs {
		out[i] = s.containerStatsLocked(c, now)
	}
	return out
}

// sandboxStatsLocked sums the stats of the sandbox's running containers.
func (s *Server) sandboxStatsLocked(sb *sandbox, now time.Time) *runtimeapi.PodSandboxStats {
	ts := now.UnixNano()
	var cpuNanos, nanoCores, mem, procs uint64
	linux := &runtimeapi.LinuxPodSandboxStats{}
	for _, c := range s.sandboxContainers(sb.id) {
		cs := s.containerStatsLocked(c, now)
		linux.Containers = append(linux.Containers, cs)
		if cs.Cpu != nil {
			cpuNanos += cs.Cpu.UsageCoreNanoSeconds.GetValue()
			nanoCores += cs.Cpu.UsageNanoCores.GetValue()
			mem += cs.Memory.WorkingSetBytes.GetValue()
			procs++
		}
	}
	linux.Cpu = &runtimeapi.CpuUsage{
		Timestamp:            ts,
		UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: cpuNanos},
		UsageNanoCores:       &runtimeapi.UInt64Value{Value: nanoCores},
	}
	linux.Memory = &runtimeapi.MemoryUsage{
		Timestamp:       ts,
		WorkingSetBytes: &runtimeapi.UInt64Value{Value: mem},
		UsageBytes:      &runtimeapi.UInt64Value{Value: mem},
		RssBytes:        &runtimeapi.UInt64Value{Value: mem},
	}
	linux.Process = &runtimeapi.ProcessUsage{Timestamp: ts, ProcessCount: &runtimeapi.UInt64Value{Value: procs}}
	linux.Network = &runtimeapi.NetworkUsage{Timestamp: ts}
	return &runtimeapi.PodSandboxStats{
		Attributes: &runtimeapi.PodSandboxAttributes{
			Id:          sb.id,
			Metadata:    clone(sb.config.GetMetadata()),
			Labels:      copyMap(sb.config.GetLabels()),
			Annotations: copyMap(sb.config.GetAnnotations()),
		},
		Linux: linux,
	}
}

func (s *Server) listSandboxStats(f *runtimeapi.PodSandboxStatsFilter) []*runtimeapi.PodSandboxStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	now := s.clock.Now()
	var out []*runtimeapi.PodSandboxStats
	for _, sb := range s.sortedSandboxes(f.GetLabelSelector()) {
		if f.GetId() != "" && !strings.HasPrefix(sb.id, f.GetId()) {
			continue
		}
		out = append(out, s.sandboxStatsLocked(sb, now))
	}
	return out
}
