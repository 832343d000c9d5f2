package stats_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodekit/nodekit/cgroupdriver"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
	"github.com/nodekit/nodekit/stats"
)

// fakeNode writes the few procfs files and a cgroup v2 tree the provider
// reads into dir, as a test does.
func fakeNode(dir string) {
	files := map[string]string{
		"proc/meminfo":                   "MemTotal: 4194304 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n",
		"proc/stat":                      "btime 1700000000\n",
		"proc/loadavg":                   "0.00 0.00 0.00 1/200 1\n",
		"proc/sys/kernel/pid_max":        "32768\n",
		"proc/sys/kernel/threads-max":    "30000\n",
		"proc/1/net/dev":                 "h\nh\n  eth0: 1 0 0 0 0 0 0 0 2 0 0 0 0 0 0 0\n",
		"cgroup/cgroup.controllers":      "cpu memory pids\n",
		"cgroup/cpu.stat":                "usage_usec 1000000\n",
		"cgroup/memory.stat":             "anon 1073741824\nfile 536870912\ninactive_file 268435456\n",
		"cgroup/kubepods/cpu.stat":       "usage_usec 500000\n",
		"cgroup/kubepods/memory.stat":    "anon 268435456\nfile 0\ninactive_file 0\n",
		"cgroup/kubepods/memory.current": "268435456\n",
		"cgroup/kubepods/memory.max":     "3221225472\n",
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			panic(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			panic(err)
		}
	}
	for _, d := range []string{"root", "images", "logs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			panic(err)
		}
	}
}

// Example computes a summary for a node on the fake runtime, with the
// pod cgroups of a cgroupdriver Manager, and reads what the eviction
// manager reads.
func Example() {
	dir, err := os.MkdirTemp("", "stats-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	fakeNode(dir)

	img, _ := fakecri.NewImage("registry.k8s.io/app:1.0", 1<<20)
	cri := fakecri.New(fakecri.Options{Images: []*runtimeapi.Image{img}, ImageFsMountpoint: filepath.Join(dir, "images")})
	endpoint, stop, err := cri.Start(filepath.Join(dir, "cri.sock"))
	if err != nil {
		panic(err)
	}
	defer stop()
	client, err := runtime.New(runtime.Options{Endpoint: endpoint})
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx := context.Background()
	rs := client.RuntimeService()
	sbConfig := &runtimeapi.PodSandboxConfig{
		Metadata:    &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "1234"},
		Annotations: map[string]string{fakecri.BehaviorAnnotation: "memory 64Mi"},
	}
	sb, _ := rs.RunPodSandbox(ctx, sbConfig, "")
	id, _ := rs.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Image:    &runtimeapi.ImageSpec{Image: "registry.k8s.io/app:1.0"},
	}, sbConfig)
	if err := rs.StartContainer(ctx, id); err != nil {
		panic(err)
	}

	cgroups, err := cgroupdriver.New(cgroupdriver.Options{FS: cgroupdriver.FSOptions{Root: filepath.Join(dir, "cgroup")}})
	if err != nil {
		panic(err)
	}
	p, err := stats.New(stats.Options{
		NodeName:   "node-1",
		RootDir:    filepath.Join(dir, "root"),
		PodLogsDir: filepath.Join(dir, "logs"),
		ProcRoot:   filepath.Join(dir, "proc"),
		CgroupRoot: filepath.Join(dir, "cgroup"),
		Runtime:    rs,
		Images:     client.ImageService(),
		Cgroups:    cgroups,
	})
	if err != nil {
		panic(err)
	}
	s, err := p.Summary(ctx)
	if err != nil {
		panic(err)
	}
	mib := func(v *uint64) uint64 { return *v >> 20 }
	fmt.Println("node working set MiB:", mib(s.Node.Memory.WorkingSetBytes), "available MiB:", mib(s.Node.Memory.AvailableBytes))
	for _, sc := range s.Node.SystemContainers {
		if sc.Name == statsapi.SystemContainerPods {
			fmt.Println("pods working set MiB:", mib(sc.Memory.WorkingSetBytes), "available MiB:", mib(sc.Memory.AvailableBytes))
		}
	}
	fmt.Println("max pids:", *s.Node.Rlimit.MaxPID, "image fs used MiB:", mib(s.Node.Runtime.ImageFs.UsedBytes))
	for _, pod := range s.Pods {
		for _, c := range pod.Containers {
			fmt.Printf("%s/%s %s working set MiB: %d\n", pod.PodRef.Namespace, pod.PodRef.Name, c.Name, mib(c.Memory.WorkingSetBytes))
		}
	}
	// Output:
	// node working set MiB: 1280 available MiB: 2816
	// pods working set MiB: 256 available MiB: 2816
	// max pids: 30000 image fs used MiB: 1
	// default/web app working set MiB: 64
}
