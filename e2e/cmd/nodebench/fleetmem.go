package main

import (
	"fmt"
	"math"
	"runtime"
	"runtime/metrics"
	"sort"
	"strings"
	"time"
)

// With -heap-by-component the heap profile is sampled every
// memProfileRate bytes allocated on average: finer than Go's default 512
// KiB so that the per-agent heap by component (a few KiB each) is more than
// a handful of samples. The sampling costs the fleet's start ~3 % of its
// CPU (a shard samples at Go's default), so it is not on by default.
const memProfileRate = 32 << 10

// heapByComponent is the in-use heap of this process by component, in
// bytes, estimated from the heap profile (as pprof scales it).
type heapByComponent map[string]float64

// components maps a function name's prefix to the component it stands
// for. A sample goes to the component of its innermost frame that
// matches, so an object the fx graph allocates is the graph's, while one a
// constructor allocates (called by the graph) is the constructor's.
var components = []struct{ prefix, name string }{
	{"compress/", "gzip readers of watch responses"},
	{"golang.org/x/net/http2.", "HTTP/2 + TLS connections to the apiserver"},
	{"crypto/tls.", "HTTP/2 + TLS connections to the apiserver"},
	{"net/http.", "HTTP/2 + TLS connections to the apiserver"},
	{"google.golang.org/grpc", "gRPC (CRI client and the fake runtime's server)"},
	{"google.golang.org/protobuf", "gRPC (CRI client and the fake runtime's server)"},
	{"github.com/nodekit/nodekit/runtime/fakecri", "the fake runtime (fakecri)"},
	{"go.uber.org/dig", "fx/dig graph"},
	{"go.uber.org/fx", "fx/dig graph"},
	{"k8s.io/client-go/tools/cache", "informers and reflectors (caches)"},
	{"k8s.io/client-go/tools/record", "event recorder and broadcaster"},
	{"k8s.io/apimachinery/pkg/watch.", "event recorder and broadcaster"},
	{"k8s.io/client-go/kubernetes", "clientsets (REST clients)"},
	{"k8s.io/client-go/rest", "clientsets (REST clients)"},
	{"k8s.io/client-go/transport", "clientsets (REST clients)"},
	{"github.com/prometheus/", "Prometheus registry and metrics"},
	{"runtime.malg", "goroutine descriptors"},
	{"github.com/nodekit/nodekit/e2e/", "the benchmark's own (e2e)"},
	{"github.com/nodekit/nodekit/", ""}, // "nodekit <package>"
}

// componentOf names the component of a sample's stack (innermost first).
func componentOf(stack []uintptr) string {
	frames := runtime.CallersFrames(stack)
	for {
		f, more := frames.Next()
		for _, c := range components {
			if strings.HasPrefix(f.Function, c.prefix) {
				if c.name != "" {
					return c.name
				}
				pkg := strings.TrimPrefix(f.Function, c.prefix)
				if i := strings.Index(pkg, "."); i >= 0 {
					pkg = pkg[:i]
				}
				return "nodekit " + pkg
			}
		}
		if !more {
			return "other"
		}
	}
}

// readHeapByComponent collects twice (the profile is as of the last
// completed collection) and sums the in-use heap by component.
func readHeapByComponent() heapByComponent {
	runtime.GC()
	runtime.GC()
	var records []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		records = make([]runtime.MemProfileRecord, n+50)
		var ok bool
		if n, ok = runtime.MemProfile(records, true); ok {
			records = records[:n]
			break
		}
	}
	out := heapByComponent{}
	for i := range records {
		r := &records[i]
		out[componentOf(r.Stack())] += scaleHeapSample(r.InUseObjects(), r.InUseBytes())
	}
	return out
}

// scaleHeapSample undoes the heap profile's sampling as pprof does: an
// object of size s is sampled with probability 1-exp(-s/rate).
func scaleHeapSample(count, size int64) float64 {
	if count <= 0 || size <= 0 {
		return 0
	}
	avg := float64(size) / float64(count)
	return float64(size) / (1 - math.Exp(-avg/float64(runtime.MemProfileRate)))
}

// perAgent is after less before, divided by n, largest first.
func (after heapByComponent) perAgent(before heapByComponent, n int) []componentBytes {
	var out []componentBytes
	for name, b := range after {
		if d := (b - before[name]) / float64(n); d > 0 {
			out = append(out, componentBytes{name, d})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].bytes > out[j].bytes })
	return out
}

type componentBytes struct {
	name  string
	bytes float64
}

// formatComponents prints the components as "name 12.3 KiB, ...", with
// the ones under 1% of the total folded into "other".
func formatComponents(cs []componentBytes) string {
	var total float64
	for _, c := range cs {
		total += c.bytes
	}
	var parts []string
	var rest float64
	for _, c := range cs {
		if c.bytes < total/100 || c.name == "other" {
			rest += c.bytes
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.1f KiB", c.name, c.bytes/1024))
	}
	parts = append(parts, fmt.Sprintf("other %.1f KiB", rest/1024))
	return fmt.Sprintf("%.0f KiB in all: %s", total/1024, strings.Join(parts, ", "))
}

// runtimeMemory are the Go runtime's own figures of this process.
type runtimeMemory struct {
	goroutines                               uint64
	heapObjects, stacks, total, heapReleased uint64
}

func readRuntimeMemory() runtimeMemory {
	samples := []metrics.Sample{
		{Name: "/sched/goroutines:goroutines"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/stacks:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
	}
	metrics.Read(samples)
	v := func(i int) uint64 {
		if samples[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return samples[i].Value.Uint64()
	}
	return runtimeMemory{goroutines: v(0), heapObjects: v(1), stacks: v(2), total: v(3), heapReleased: v(4)}
}

// gcCPU is the CPU time this process's garbage collector used so far, as
// the Go runtime estimates it (/cpu/classes/gc/total:cpu-seconds).
func gcCPU() time.Duration {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return time.Duration(s[0].Value.Float64() * float64(time.Second))
}
