package agent_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/agent/agenttest"
	nkruntime "github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/stats"
)

// idleGoroutines are functions no goroutine of an idle agent runs: the
// modules with nothing to do (policy none, no shutdown grace period,
// nothing to serve) and an event queue with no event pending.
var idleGoroutines = []string{
	"cpumanager.(*Manager).Run",
	"memorymanager.(*Manager).Run",
	"nodeshutdown.(*Manager).Run",
	"server.(*Server).Run",
	"agent.(*eventRecorder).work",
	"record.(*eventBroadcasterImpl)",
	"watch.(*Broadcaster).loop",
}

// maxGoroutinesPerIdleAgent bounds the goroutines of an idle agent on
// fakecri as agent/fleet runs it (called in process, no node API, no
// healthz listener), the agent's own Services informer included (a fleet
// shares one) and its fake clientset's watchers: 43 at the time of
// writing (61 over the fake's socket: its two gRPC connections, both
// ends). Each costs its stack (4–8 KiB) in every agent of a fleet; a
// module that adds one should start it only once it has work.
const maxGoroutinesPerIdleAgent = 44

// TestIdleAgentGoroutines starts agents as a fleet does and checks that,
// once Ready and idle, the modules with nothing to do hold no goroutine
// and the agents hold at most maxGoroutinesPerIdleAgent each.
func TestIdleAgentGoroutines(t *testing.T) {
	const agents = 3
	before := runtime.NumGoroutine()
	nodes := make([]*agenttest.Node, agents)
	for i := range nodes {
		nodes[i] = agenttest.Start(t, agenttest.Options{
			Name:         fmt.Sprintf("idle-%d", i),
			Args:         []string{"--healthz-port=0"},
			Configure:    func(c *agent.Config) { c.Kubelet.EnableServer = ptr.To(false) },
			InProcessCRI: true,
		})
	}
	ctx := agenttest.Context(t)
	for _, n := range nodes {
		n.WaitReady(ctx)
	}
	var found []string
	var perAgent float64
	// The last events of the start may still be written: wait for the
	// agents to settle.
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		buf := make([]byte, 1<<22)
		stacks := string(buf[:runtime.Stack(buf, true)])
		perAgent = float64(runtime.NumGoroutine()-before) / agents
		found = found[:0]
		for _, g := range strings.Split(stacks, "\n\n") {
			for _, fn := range idleGoroutines {
				if strings.Contains(g, fn) {
					found = append(found, firstLines(g, 6))
				}
			}
		}
		return len(found) == 0 && perAgent <= maxGoroutinesPerIdleAgent, nil
	})
	if err != nil {
		t.Errorf("idle agents: %.1f goroutines each (at most %d), idle modules' goroutines:\n%s",
			perAgent, maxGoroutinesPerIdleAgent, strings.Join(found, "\n\n"))
	}
	t.Logf("%.1f goroutines per idle agent", perAgent)
}

// TestIdleLoopsAskThePLEG: the eviction manager's stats rounds and log
// rotation ask the PLEG before they list the runtime (whether it holds any
// pod, whether any pod runs): no on a node with no pod, yes once one runs.
func TestIdleLoopsAskThePLEG(t *testing.T) {
	var statsOpts stats.Options
	var rotatorOpts nkruntime.LogRotatorOptions
	n := agenttest.Start(t, agenttest.Options{Extra: []fx.Option{fx.Populate(&statsOpts, &rotatorOpts)}})
	ctx := agenttest.Context(t)
	n.WaitReady(ctx)
	if statsOpts.HasPods == nil || rotatorOpts.Running == nil {
		t.Fatal("stats.Options.HasPods or runtime.LogRotatorOptions.Running is not set")
	}
	if statsOpts.HasPods() || rotatorOpts.Running() {
		t.Errorf("with no pod: the stats provider's HasPods %t, the log rotator's Running %t; want false", statsOpts.HasPods(), rotatorOpts.Running())
	}
	pod := n.CreatePod(ctx, agenttest.Pod("one", "busybox"))
	n.WaitForPod(ctx, pod, agenttest.PodRunningAndReady)
	// The PLEG takes the started pod in from the sync's status (queued,
	// so maybe just after the Running status is written).
	poll(ctx, t, "the stats provider and the log rotator see the pod", func() bool {
		return statsOpts.HasPods() && rotatorOpts.Running()
	})
}

func firstLines(s string, n int) string {
	lines := bytes.SplitN([]byte(s), []byte("\n"), n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// BenchmarkIdleAgent starts b.N agents as a fleet does (each on its own
// fake clientset and fakecri, called in process or, cri=socket, over its
// socket; no node API, no healthz listener), waits for all to be Ready
// and reports what each holds once they are idle: the live heap (after a
// collection), goroutine stacks and goroutines. The fake runtime's side
// and the fake clientset are counted: a figure to compare between
// commits, not the fleet's own (nodebench measures that).
//
//	go test -run '^$' -bench IdleAgent -benchtime=30x ./agent
func BenchmarkIdleAgent(b *testing.B) {
	for _, inProcess := range []bool{true, false} {
		name := "cri=socket"
		if inProcess {
			name = "cri=in-process"
		}
		b.Run(name, func(b *testing.B) { benchmarkIdleAgent(b, inProcess) })
	}
}

func benchmarkIdleAgent(b *testing.B, inProcessCRI bool) {
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()
	var nodes []*agenttest.Node
	for i := 0; b.Loop(); i++ {
		nodes = append(nodes, agenttest.Start(b, agenttest.Options{
			Name:         fmt.Sprintf("idle-%d", i),
			Args:         []string{"--healthz-port=0"},
			Configure:    func(c *agent.Config) { c.Kubelet.EnableServer = ptr.To(false) },
			InProcessCRI: inProcessCRI,
		}))
	}
	ctx := agenttest.Context(b)
	for _, n := range nodes {
		n.WaitReady(ctx)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	n := float64(len(nodes))
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/1024/n, "heap-KiB/agent")
	b.ReportMetric(float64(after.StackInuse-before.StackInuse)/1024/n, "stack-KiB/agent")
	b.ReportMetric(float64(runtime.NumGoroutine()-goroutines)/n, "goroutines/agent")
}

// BenchmarkNew builds (fx.New, without starting) an agent's application:
// what every agent of a fleet pays in CPU and garbage before it starts.
//
//	go test -run '^$' -bench '^BenchmarkNew$' -benchtime=200x ./agent
func BenchmarkNew(b *testing.B) {
	cfg := agenttest.Config(b, "new", "unix:///nonexistent/cri.sock", "--healthz-port=0")
	b.ReportAllocs()
	for b.Loop() {
		if err := agent.New(cfg).Err(); err != nil {
			b.Fatal(err)
		}
	}
}
