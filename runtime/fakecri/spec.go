package fakecri

import (
	"encoding/json"
	"fmt"
	"path"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// containerInfoLocked returns the verbose status of c as containerd's CRI
// plugin reports it: the key "info" holds JSON with the sandbox ID, the
// pid (0: fakecri runs no process) and "runtimeSpec", the OCI runtime spec
// the container runs with — its process (args, env, cwd, OOM score), the
// sandbox's hostname, linux.cgroupsPath (<cgroup parent>/<container ID>, the
// cgroupfs layout containerd uses) and linux.resources from the container's
// current resources. Tools that read containerd's verbose status (crictl
// inspect, tests locating a container's cgroup) read fakecri's alike. The
// Server's mutex must be held.
func (s *Server) containerInfoLocked(c *container) (map[string]string, error) {
	spec := specs.Spec{Version: specs.Version, Process: &specs.Process{}, Linux: &specs.Linux{}}
	cfg := c.config
	spec.Process.Args = append(append([]string(nil), cfg.GetCommand()...), cfg.GetArgs()...)
	for _, kv := range cfg.GetEnvs() {
		spec.Process.Env = append(spec.Process.Env, kv.GetKey()+"="+string(kv.GetValue()))
	}
	spec.Process.Cwd = cfg.GetWorkingDir()
	if spec.Process.Cwd == "" {
		spec.Process.Cwd = "/"
	}
	if sb, ok := s.sandboxes[c.sandboxID]; ok {
		spec.Hostname = sb.config.GetHostname()
		if parent := sb.config.GetLinux().GetCgroupParent(); parent != "" {
			spec.Linux.CgroupsPath = path.Join(parent, c.id)
		}
	}
	res := c.resources.GetLinux()
	if res == nil {
		res = cfg.GetLinux().GetResources()
	}
	spec.Linux.Resources = linuxResources(res)
	if res != nil && res.GetOomScoreAdj() != 0 {
		adj := int(res.GetOomScoreAdj())
		spec.Process.OOMScoreAdj = &adj
	}
	info, err := json.Marshal(struct {
		SandboxID   string      `json:"sandboxID"`
		Pid         int         `json:"pid"`
		RuntimeSpec *specs.Spec `json:"runtimeSpec"`
	}{SandboxID: c.sandboxID, RuntimeSpec: &spec})
	if err != nil {
		return nil, fmt.Errorf("encode the verbose status of container %s: %w", c.id, err)
	}
	return map[string]string{"info": string(info)}, nil
}

// linuxResources converts the CRI's container resources to the OCI spec's,
// leaving out what the CRI leaves unset (zero).
func linuxResources(r *runtimeapi.LinuxContainerResources) *specs.LinuxResources {
	if r == nil {
		return nil
	}
	out := &specs.LinuxResources{CPU: &specs.LinuxCPU{Cpus: r.GetCpusetCpus(), Mems: r.GetCpusetMems()}, Memory: &specs.LinuxMemory{}}
	if v := uint64(r.GetCpuShares()); v > 0 {
		out.CPU.Shares = &v
	}
	if v := r.GetCpuQuota(); v != 0 {
		out.CPU.Quota = &v
	}
	if v := uint64(r.GetCpuPeriod()); v > 0 {
		out.CPU.Period = &v
	}
	if v := r.GetMemoryLimitInBytes(); v > 0 {
		out.Memory.Limit = &v
	}
	if v := r.GetMemorySwapLimitInBytes(); v > 0 {
		out.Memory.Swap = &v
	}
	if len(r.GetUnified()) > 0 {
		out.Unified = r.GetUnified()
	}
	return out
}
