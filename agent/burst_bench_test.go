package agent_test

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/agent/agenttest"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// burstPods is how many pods BenchmarkPodBurst creates at once, nodebench's
// fakecri burst.
const burstPods = 100

// BenchmarkPodBurst starts one agent on fakecri and the fake clientset,
// then per iteration creates burstPods pods at once and waits until the API
// shows every one Running; the pods are deleted outside the timer. Besides
// the time, it reports per pod: the agent's pod status writes
// (status-writes/pod), all its API requests (api-requests/pod) and its CRI
// calls (cri-calls/pod). Profile it with -cpuprofile.
func BenchmarkPodBurst(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	images := fakecri.Options{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS, PullAny: true}
	n := agenttest.Start(b, agenttest.Options{CRI: &images})
	n.WaitReady(ctx)
	var statusWrites, requests, criCalls int
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		actionsBefore, criBefore := len(n.Client.Actions()), criCallCount(n.CRI)
		running := watchRunning(b, ctx, n, burstPods)
		b.StartTimer()
		var wg sync.WaitGroup
		for p := range burstPods {
			pod := agenttest.Pod(fmt.Sprintf("burst-%d-%03d", i, p), "busybox")
			pod.UID = types.UID(fmt.Sprintf("uid-burst-%d-%03d", i, p))
			wg.Go(func() { n.CreatePod(ctx, pod) })
		}
		wg.Wait()
		<-running
		b.StopTimer()
		actions := n.Client.Actions()[actionsBefore:]
		for _, a := range actions {
			if a.GetResource().Resource == "pods" && a.GetSubresource() == "status" {
				statusWrites++
			}
		}
		requests += agentRequests(actions)
		criCalls += criCallCount(n.CRI) - criBefore
		deleteBurst(b, ctx, n, i)
		b.StartTimer()
	}
	b.StopTimer()
	pods := float64(b.N * burstPods)
	b.ReportMetric(float64(statusWrites)/pods, "status-writes/pod")
	b.ReportMetric(float64(requests)/pods, "api-requests/pod")
	b.ReportMetric(float64(criCalls)/pods, "cri-calls/pod")
}

// agentRequests counts the actions the agent made: all but the benchmark's
// own pod creations and deletions.
func agentRequests(actions []clienttesting.Action) int {
	n := 0
	for _, a := range actions {
		if a.GetResource().Resource == "pods" && a.GetSubresource() == "" && (a.GetVerb() == "create" || a.GetVerb() == "delete-collection") {
			continue
		}
		n++
	}
	return n
}

// criCallCount sums the fake runtime's calls of every CRI method.
func criCallCount(s *fakecri.Server) int {
	n := 0
	for _, c := range criCalls(s) {
		n += c
	}
	return n
}

// nonZero returns the entries of m that are not 0.
func nonZero(m map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// criCalls returns the fake runtime's calls by CRI method.
func criCalls(s *fakecri.Server) map[string]int {
	calls := map[string]int{}
	for _, desc := range []string{"RunPodSandbox", "StopPodSandbox", "RemovePodSandbox", "PodSandboxStatus", "ListPodSandbox",
		"CreateContainer", "StartContainer", "StopContainer", "RemoveContainer", "ListContainers", "ContainerStatus",
		"UpdateContainerResources", "ExecSync", "Status", "Version", "ImageStatus", "ListImages", "PullImage", "ImageFsInfo",
		"ListContainerStats", "ListPodSandboxStats", "ContainerStats", "PodSandboxStats", "ListMetricDescriptors",
		"ListPodSandboxMetrics", "RuntimeConfig", "UpdatePodSandboxResources"} {
		calls[desc] = s.Calls(desc)
	}
	return calls
}

// watchRunning returns a channel closed once pods pods show phase Running
// on the fake API.
func watchRunning(b *testing.B, ctx context.Context, n *agenttest.Node, pods int) <-chan struct{} {
	b.Helper()
	w, err := n.Client.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer w.Stop()
		running := map[types.UID]bool{}
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*v1.Pod); ok && p.Status.Phase == v1.PodRunning {
				running[p.UID] = true
				if len(running) == pods {
					close(done)
					return
				}
			}
		}
	}()
	return done
}

// deleteBurst deletes the pods of iteration i and waits until the agent
// removed them.
func deleteBurst(b *testing.B, ctx context.Context, n *agenttest.Node, i int) {
	b.Helper()
	for p := range burstPods {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("burst-%d-%03d", i, p)}}
		if err := n.Client.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	conn, err := grpc.NewClient(n.Config.Kubelet.ContainerRuntimeEndpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	for ctx.Err() == nil {
		sbs, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			b.Fatal(err)
		}
		if len(sbs.Items) == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatal(ctx.Err())
}

// BenchmarkIdle30Pods starts one agent on fakecri with 30 running pods and
// lets it idle: each iteration is one second. It reports the CPU time of
// the whole process (agent and fake runtime) per second of idling
// (cpu-ms/s), the CRI calls and API requests per second. With
// NODEKIT_IDLE_CPUPROFILE=<file> it writes a CPU profile of the idle
// window only (-cpuprofile would include the start and the pods').
func BenchmarkIdle30Pods(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	images := fakecri.Options{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS, PullAny: true}
	n := agenttest.Start(b, agenttest.Options{CRI: &images})
	n.WaitReady(ctx)
	running := watchRunning(b, ctx, n, 30)
	for p := range 30 {
		n.CreatePod(ctx, agenttest.Pod(fmt.Sprintf("idle-%02d", p), "busybox"))
	}
	<-running
	// Let the start's trailing work (events, status writes) finish.
	time.Sleep(3 * time.Second)
	if path := os.Getenv("NODEKIT_IDLE_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	actionsBefore, criBefore, cpuBefore := len(n.Client.Actions()), criCalls(n.CRI), processCPU(b)
	b.ResetTimer()
	for range b.N {
		time.Sleep(time.Second)
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpuBefore).Microseconds())/1000/float64(b.N), "cpu-ms/s")
	calls := criCalls(n.CRI)
	total := 0
	for m, c := range calls {
		calls[m] = c - criBefore[m]
		total += calls[m]
	}
	b.ReportMetric(float64(total)/float64(b.N), "cri-calls/s")
	actions := n.Client.Actions()[actionsBefore:]
	requests := map[string]int{}
	for _, a := range actions {
		requests[a.GetVerb()+" "+a.GetResource().Resource+"/"+a.GetSubresource()]++
	}
	b.ReportMetric(float64(len(actions))/float64(b.N), "api-requests/s")
	b.Logf("over %d s: CRI calls %v; API requests %v", b.N, nonZero(calls), requests)
}

// processCPU is the user and system CPU time this process used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
