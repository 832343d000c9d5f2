package fakecri_test

import (
	"encoding/json"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/runtime/fakecri"
)

// TestVerboseContainerStatusCarriesTheRuntimeSpec: as containerd's, a
// verbose ContainerStatus carries the OCI runtime spec, with the cgroup path
// under the sandbox's cgroup parent and the container's resources.
func TestVerboseContainerStatusCarriesTheRuntimeSpec(t *testing.T) {
	f := newFixture(t, fakecri.Options{})
	cfg := sandboxConfig("web", nil)
	cfg.Hostname = "web"
	cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/burstable/poduid-web"}
	sb := f.runSandbox(t, cfg)
	resp, err := f.c.rt.CreateContainer(ctx(t), &runtimeapi.CreateContainerRequest{
		PodSandboxId:  sb,
		SandboxConfig: cfg,
		Config: &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
			Image:    &runtimeapi.ImageSpec{Image: f.img},
			Command:  []string{"sleep"},
			Args:     []string{"3600"},
			Envs:     []*runtimeapi.KeyValue{{Key: "A", Value: []byte("b")}},
			Linux: &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{
				CpuShares: 512, CpuQuota: 50000, CpuPeriod: 100000, MemoryLimitInBytes: 64 << 20, OomScoreAdj: 900,
			}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.ContainerId
	plain, err := f.c.rt.ContainerStatus(ctx(t), &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	if len(plain.Info) != 0 {
		t.Errorf("a non-verbose status carries info: %v", plain.Info)
	}
	verbose, err := f.c.rt.ContainerStatus(ctx(t), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		SandboxID   string     `json:"sandboxID"`
		RuntimeSpec specs.Spec `json:"runtimeSpec"`
	}
	if err := json.Unmarshal([]byte(verbose.Info["info"]), &info); err != nil {
		t.Fatalf("decode info %q: %v", verbose.Info["info"], err)
	}
	spec := info.RuntimeSpec
	if info.SandboxID != sb || spec.Hostname != "web" || spec.Linux == nil || spec.Process == nil {
		t.Fatalf("info = %+v", info)
	}
	if want := "/kubepods/burstable/poduid-web/" + id; spec.Linux.CgroupsPath != want {
		t.Errorf("cgroupsPath = %q, want %q", spec.Linux.CgroupsPath, want)
	}
	if got := spec.Process.Args; len(got) != 2 || got[0] != "sleep" || got[1] != "3600" {
		t.Errorf("args = %v", got)
	}
	if len(spec.Process.Env) != 1 || spec.Process.Env[0] != "A=b" || spec.Process.OOMScoreAdj == nil || *spec.Process.OOMScoreAdj != 900 {
		t.Errorf("env/oom = %v/%v", spec.Process.Env, spec.Process.OOMScoreAdj)
	}
	r := spec.Linux.Resources
	if r == nil || r.CPU == nil || r.Memory == nil || *r.CPU.Shares != 512 || *r.CPU.Quota != 50000 || *r.CPU.Period != 100000 || *r.Memory.Limit != 64<<20 {
		t.Errorf("resources = %+v", r)
	}
}
