package prober

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// benchServerEnv makes the test binary serve the benchmark's probe targets
// instead of running tests, so their CPU is not counted as the prober's.
const benchServerEnv = "NODEKIT_PROBER_BENCH_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(benchServerEnv) == "1" {
		serveBenchTargets()
		return
	}
	os.Exit(m.Run())
}

// serveBenchTargets serves an HTTP endpoint answering 200 "ok" and a TCP
// port that accepts and closes, prints "<http addr> <tcp addr>", and exits
// when stdin closes.
func serveBenchTargets() {
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}), ReadHeaderTimeout: 5 * time.Second}
	srv.SetKeepAlivesEnabled(false)
	go func() { _ = srv.Serve(hl) }()
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	fmt.Printf("%s %s\n", hl.Addr(), tl.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// startBenchTargets starts the target server in a child process.
func startBenchTargets(b *testing.B) (httpPort, tcpPort int) {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), benchServerEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	var ha, ta string
	if _, err := fmt.Fscan(bufio.NewReader(stdout), &ha, &ta); err != nil {
		b.Fatal(err)
	}
	port := func(a string) int {
		_, p, _ := net.SplitHostPort(a)
		n, _ := strconv.Atoi(p)
		return n
	}
	return port(ha), port(ta)
}

// countingHandler wraps a handler, counting runs and failures and the
// spread of the intervals between runs of one worker around its period.
type countingHandler struct {
	Handler
	runs, failures atomic.Int64

	mu       sync.Mutex
	last     map[*Target]time.Time
	lateness []time.Duration // interval − period, per run
	record   bool
	period   time.Duration
}

func (h *countingHandler) Probe(ctx context.Context, t *Target) (Result, string, error) {
	now := time.Now()
	h.mu.Lock()
	if prev, ok := h.last[t]; ok && h.record {
		h.lateness = append(h.lateness, now.Sub(prev)-h.period)
	}
	h.last[t] = now
	h.mu.Unlock()
	res, out, err := h.Handler.Probe(ctx, t)
	h.runs.Add(1)
	if res != Success || err != nil {
		h.failures.Add(1)
	}
	return res, out, err
}

// benchPods returns n pods (UIDs prefix-i) with one container whose
// readiness probe, every period seconds, is made by probe, and their
// statuses: the container running since startedAt.
func benchPods(prefix string, n int, period int32, startedAt time.Time, probe func() *v1.Probe, statuses map[types.UID]v1.PodStatus) []*v1.Pod {
	pods := make([]*v1.Pod, n)
	for i := range pods {
		uid := types.UID(prefix + strconv.Itoa(i))
		p := probe()
		p.PeriodSeconds, p.TimeoutSeconds, p.SuccessThreshold, p.FailureThreshold = period, 1, 1, 3
		pods[i] = &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: string(uid), Namespace: "bench", UID: uid},
			Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app", ReadinessProbe: p}}},
		}
		statuses[uid] = v1.PodStatus{
			Phase: v1.PodRunning, PodIP: "127.0.0.1",
			ContainerStatuses: []v1.ContainerStatus{{
				Name: "app", ContainerID: "bench://" + string(uid), Started: ptr.To(true),
				State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.NewTime(startedAt)}},
			}},
		}
	}
	return pods
}

// cpuTime returns the process's user and system CPU time.
func cpuTime() (user, sys time.Duration) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// BenchmarkProbes runs 10,000 tcpSocket and/or 10,000 httpGet readiness
// probes every second (and, for comparison, every 10 s, the default period)
// against a server in a child process, on the real clock with the default
// handlers, and reports per probe run the CPU time (user and system) and
// allocations of this process (the prober, its handlers, the kernel's side
// of the connections the process makes, the Go runtime), the goroutines
// alive, failed runs, and how far the intervals between a worker's runs
// strayed from its period. One op is one probe run; ns/op is wall time per
// run (the inverse of the rate achieved), cpu-ns/probe the CPU. Run it with
// a count of runs, e.g. -benchtime=200000x (about ten seconds at 20,000
// probes per second, if the machine keeps up).
func BenchmarkProbes(b *testing.B) {
	for _, tc := range []struct {
		name      string
		tcp, http int
		period    int32
	}{
		{"tcp=10k,period=1s", 10000, 0, 1},
		{"http=10k,period=1s", 0, 10000, 1},
		{"tcp=10k,http=10k,period=1s", 10000, 10000, 1},
		{"tcp=10k,http=10k,period=10s", 10000, 10000, 10},
		{"tcp=10k,period=10s", 10000, 0, 10},
		{"http=10k,period=10s", 0, 10000, 10},
	} {
		b.Run(tc.name, func(b *testing.B) { benchProbes(b, tc.tcp, tc.http, tc.period, false) })
	}
}

// BenchmarkTickerPerWorker runs BenchmarkProbes' cases the kubelet's way,
// for comparison on the same machine at the same time: a goroutine per
// probe with a ticker, calling the same handlers directly (none of the
// worker's bookkeeping).
func BenchmarkTickerPerWorker(b *testing.B) {
	for _, tc := range []struct {
		name      string
		tcp, http int
		period    int32
	}{
		{"tcp=10k,period=1s", 10000, 0, 1},
		{"tcp=10k,http=10k,period=10s", 10000, 10000, 10},
	} {
		b.Run(tc.name, func(b *testing.B) { benchProbes(b, tc.tcp, tc.http, tc.period, true) })
	}
}

func benchProbes(b *testing.B, nTCP, nHTTP int, period int32, tickers bool) {
	httpPort, tcpPort := startBenchTargets(b)
	statuses := map[types.UID]v1.PodStatus{}
	var pods []*v1.Pod
	pods = append(pods, benchPods("tcp-", nTCP, period, time.Now().Add(-time.Hour), func() *v1.Probe {
		return &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(tcpPort))}}}
	}, statuses)...)
	pods = append(pods, benchPods("http-", nHTTP, period, time.Now().Add(-time.Hour), func() *v1.Probe {
		return &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(int32(httpPort))}}}
	}, statuses)...)
	tcpH := &countingHandler{Handler: NewTCPHandler(), last: map[*Target]time.Time{}, period: time.Duration(period) * time.Second}
	httpH := &countingHandler{Handler: NewHTTPHandler(), last: map[*Target]time.Time{}, period: time.Duration(period) * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var m *Manager
	if tickers {
		for _, pod := range pods {
			c := &pod.Spec.Containers[0]
			t := &Target{ProbeType: Readiness, Pod: pod, Container: c, Probe: c.ReadinessProbe, PodIP: "127.0.0.1", Timeout: time.Second}
			h := Handler(tcpH)
			if KindOf(c.ReadinessProbe) == KindHTTPGet {
				h = httpH
			}
			wg.Go(func() {
				p := time.Duration(period) * time.Second
				select {
				case <-time.After(time.Duration(rand.Int64N(int64(p)))):
				case <-ctx.Done():
					return
				}
				tick := time.NewTicker(p)
				defer tick.Stop()
				for {
					_, _, _ = h.Probe(ctx, t)
					select {
					case <-tick.C:
					case <-ctx.Done():
						return
					}
				}
			})
		}
	} else {
		var err error
		m, err = New(Options{
			// The map is read-only from here on; statuses are returned as
			// they are (podstatus.Manager.GetPodStatus deep-copies).
			PodStatus: func(uid types.UID) (v1.PodStatus, bool) { s, ok := statuses[uid]; return s, ok },
			Handlers:  []Handler{tcpH, httpH},
		})
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() { _ = m.Run(ctx) })
		for _, p := range pods {
			m.AddPod(p)
		}
	}
	runs := func() int64 { return tcpH.runs.Load() + httpH.runs.Load() }
	total := int64(len(pods))

	// Warm up: every worker has run twice (its random first delay is
	// within a period).
	for runs() < 2*total {
		time.Sleep(10 * time.Millisecond)
	}
	for _, h := range []*countingHandler{tcpH, httpH} {
		h.mu.Lock()
		h.record = true
		h.mu.Unlock()
	}
	runtime.GC()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	heapPerWorker := float64(ms0.HeapAlloc) / float64(total)
	fail0 := tcpH.failures.Load() + httpH.failures.Load()
	b.ResetTimer()
	user0, sys0 := cpuTime()
	start, runs0 := time.Now(), runs()
	maxG, sumG, samples := 0, 0, 0
	for runs()-runs0 < int64(b.N) {
		time.Sleep(20 * time.Millisecond)
		g := runtime.NumGoroutine()
		maxG = max(maxG, g)
		sumG += g
		samples++
	}
	user1, sys1 := cpuTime()
	user, sys, wall, n := user1-user0, sys1-sys0, time.Since(start), runs()-runs0
	cpu := user + sys
	runtime.ReadMemStats(&ms1)
	b.StopTimer()
	failures := tcpH.failures.Load() + httpH.failures.Load() - fail0

	var late []time.Duration
	for _, h := range []*countingHandler{tcpH, httpH} {
		h.mu.Lock()
		late = append(late, h.lateness...)
		h.mu.Unlock()
	}
	slices.Sort(late)
	pct := func(p float64) float64 {
		if len(late) == 0 {
			return 0
		}
		return float64(late[int(float64(len(late)-1)*p)]) / float64(time.Millisecond)
	}
	if m != nil {
		alive, started := m.pool.stats()
		b.ReportMetric(float64(started), "pool-goroutines-started")
		b.ReportMetric(float64(alive), "pool-goroutines-alive")
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/probe")
	b.ReportMetric(float64(user.Nanoseconds())/float64(n), "user-ns/probe")
	b.ReportMetric(float64(sys.Nanoseconds())/float64(n), "sys-ns/probe")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(n), "allocs/probe")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(n), "B/probe")
	b.ReportMetric(float64(n)/wall.Seconds(), "probes/s")
	b.ReportMetric(float64(cpu)/float64(wall), "cores")
	b.ReportMetric(float64(maxG), "goroutines-max")
	b.ReportMetric(float64(sumG)/float64(max(samples, 1)), "goroutines-mean")
	b.ReportMetric(heapPerWorker, "heap-B/worker")
	b.ReportMetric(pct(0.5), "interval-dev-p50-ms")
	b.ReportMetric(pct(0.99), "interval-dev-p99-ms")
	b.ReportMetric(pct(1), "interval-dev-max-ms")
	b.ReportMetric(float64(failures), "failed-runs")
}

// nopHandler answers Success at once.
type nopHandler struct{ kind Kind }

func (h nopHandler) Kind() Kind { return h.kind }
func (nopHandler) Probe(context.Context, *Target) (Result, string, error) {
	return Success, "", nil
}

// BenchmarkEngine measures the engine alone: 20,000 workers (10,000 with
// tcpSocket, 10,000 with httpGet probes) whose handlers answer at once, on
// a fake clock stepped a period at a time, so every worker runs once per
// step. One op is one probe run: the scheduler, the pool, the worker's
// checks, the result cache and the metrics (to a registry). It also
// reports the heap the workers hold.
func BenchmarkEngine(b *testing.B) {
	const workers = 20000
	clk := testingclock.NewFakeClock(t0)
	statuses := map[types.UID]v1.PodStatus{}
	pods := append(benchPods("tcp-", workers/2, 1, t0, func() *v1.Probe {
		return &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(1)}}}
	}, statuses), benchPods("http-", workers/2, 1, t0, func() *v1.Probe {
		return &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromInt32(1)}}}
	}, statuses)...)
	m, err := New(Options{
		PodStatus:  func(uid types.UID) (v1.PodStatus, bool) { s, ok := statuses[uid]; return s, ok },
		Handlers:   []Handler{nopHandler{KindTCPSocket}, nopHandler{KindHTTPGet}},
		Clock:      clk,
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		b.Fatal(err)
	}
	clk.Step(time.Minute) // no random first delay
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, p := range pods {
		m.AddPod(p)
	}
	settle := func() {
		for !m.idle() {
			time.Sleep(50 * time.Microsecond)
		}
	}
	settle()
	clk.Step(time.Second) // a warm-up round: metric series exist
	settle()
	rounds := max(1, b.N/workers)
	runtime.GC()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	// What the workers hold: their state, specs, heap slot, cached
	// results and metric series.
	heapPerWorker := float64(ms0.HeapAlloc-before.HeapAlloc) / workers
	b.ResetTimer()
	user0, sys0 := cpuTime()
	maxG := 0
	for range rounds {
		clk.Step(time.Second)
		for !m.idle() {
			maxG = max(maxG, runtime.NumGoroutine())
			time.Sleep(50 * time.Microsecond)
		}
	}
	user1, sys1 := cpuTime()
	cpu := user1 - user0 + sys1 - sys0
	runtime.ReadMemStats(&ms1)
	b.StopTimer()
	n := float64(rounds * workers)
	_, started := m.pool.stats()
	b.ReportMetric(float64(cpu.Nanoseconds())/n, "cpu-ns/probe")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/n, "allocs/probe")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/n, "B/probe")
	b.ReportMetric(float64(maxG), "goroutines-max")
	b.ReportMetric(float64(started), "pool-goroutines-started")
	b.ReportMetric(heapPerWorker, "heap-B/worker")
}
