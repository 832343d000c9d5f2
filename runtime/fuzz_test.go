package runtime_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
	"github.com/nodekit/nodekit/status/podstatus"
)

// FuzzCRIReplies runs a pod through the runtime adapter while the runtime
// answers whatever the fuzz input says: fakecri does the work, and its
// reply rewriter (fakecri.Server.SetReplyRewriter) turns each reply into an
// error of any gRPC code, an empty message, or the same reply with fields
// cleared, set to odd values (unknown enum states, zero, negative and
// huge timestamps and counters, empty, foreign or path-like strings and
// IDs, unparseable IPs), list entries duplicated, dropped or added, and
// labels and annotations changed. The first input byte shapes the pod
// (restart policy, an init container, one or two containers, host
// network); each later byte steers one decision of the rewriter, and once
// the input is used up the runtime tells the truth.
//
// Each round runs the PLEG's relist, the Backend's SyncPod and the status
// generator on what the cache holds; the second also the container garbage
// collection, the third the housekeeping's kill of what the runtime lists
// (as of orphans, from labels and annotations alone), the fourth the pod's
// deletion (KillPod, RemovePod). Invariants: nothing panics; a sync
// creates at most one sandbox; a status read without error is of the pod
// asked for, with no nil entries; the generated API status has one
// container status per container of the spec; nothing outside the pod logs
// directory is removed. Then, with the runtime honest again, a few syncs
// bring the pod to at most one ready sandbox (exactly one, with every
// container running in it, for restartPolicy Always; a pod that must not
// restart may have been stopped for good), and killing and removing the
// pod leaves nothing of it in the runtime.
//
//	go test -run='^$' -fuzz=FuzzCRIReplies -fuzztime=1m ./runtime/
func FuzzCRIReplies(f *testing.F) {
	f.Add([]byte{0})
	f.Add([]byte{0x10, 200, 1, 0, 200, 2, 3})
	f.Add([]byte{0x05, 130, 0, 0, 0, 250, 7, 0, 9, 200, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Add([]byte("\x02\xc8\x01\x00\x00\xc8\x02\x02\x00\xc8\x03\x01\x01\xff\xff\xff\xff\xff"))
	f.Add([]byte{0x00, 128, 14, 128, 4, 128, 5})
	f.Add([]byte{0x01, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255})

	h := newHarness(f, fakecri.Options{}, nil)
	pleg, err := runtime.NewPLEG(runtime.PLEGOptions{Pods: h.pm, Clock: h.clk})
	if err != nil {
		f.Fatal(err)
	}
	backend, err := runtime.NewBackend(runtime.BackendOptions{Pods: h.pm, PLEG: pleg, Clock: h.clk})
	if err != nil {
		f.Fatal(err)
	}
	honest := h.client.RuntimeService()
	// Connected before the first input: a failed handshake is retried only
	// a second later (on the real clock), which is not what this is about.
	if _, err := honest.Version(h.ctx, ""); err != nil {
		f.Fatal(err)
	}
	if _, err := h.client.ImageService().ImageFsInfo(h.ctx); err != nil {
		f.Fatal(err)
	}
	var execs atomic.Int64
	// One input at a time: the harness (clock, fake runtime, PLEG) is
	// shared by the inputs a fuzzing process runs.
	var mu sync.Mutex

	f.Fuzz(func(t *testing.T, data []byte) {
		mu.Lock()
		defer mu.Unlock()
		ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), logr.Discard()), time.Minute)
		defer cancel()
		h.ctx = ctx
		n := execs.Add(1)
		in := &fuzzBytes{data: data}
		pod := fuzzPod(n, in.next())
		// A directory next to the pod logs directory, where a sandbox named
		// "../outside" would put the pod's logs.
		outside := filepath.Join(filepath.Dir(h.logsDir), "outside_"+pod.Name+"_"+string(pod.UID))
		if err := os.MkdirAll(outside, 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(outside)
		rw := &replyFuzzer{in: in}
		h.cri.SetReplyRewriter(rw.rewrite)
		defer h.cri.SetReplyRewriter(nil)
		drain := func() {
			for {
				select {
				case <-pleg.Events():
				case <-h.rec.Events:
				default:
					return
				}
			}
		}

		// Lies.
		for round := 0; round < 4 && !in.done(); round++ {
			h.clk.Step(time.Second)
			pleg.Relist(ctx)
			drain()
			created := h.cri.Calls("RunPodSandbox")
			backend.SyncPod(ctx, pod)
			drain()
			if c := h.cri.Calls("RunPodSandbox") - created; c > 1 {
				t.Fatalf("round %d: one sync created %d sandboxes", round, c)
			}
			st, err := pleg.Cache().Get(pod.UID)
			if err != nil {
				continue
			}
			checkPodStatus(t, pod, st)
			api := podstatus.Generate(pod, st, nil, podstatus.GenerateOptions{})
			if got, want := len(api.ContainerStatuses), len(pod.Spec.Containers); got != want {
				t.Fatalf("round %d: generated %d container statuses for %d containers: %+v", round, got, want, api.ContainerStatuses)
			}
			switch round {
			case 1:
				// Container garbage collection.
				_ = h.pm.GarbageCollect(ctx, func(types.UID) bool { return false })
			case 2:
				// Housekeeping of orphans: what the runtime lists is killed
				// from its labels and annotations alone.
				if running, err := h.pm.ListPods(ctx, false); err == nil {
					for _, rp := range running {
						_ = h.pm.KillPod(ctx, nil, rp, nil)
					}
				}
			case 3:
				// The pod's deletion.
				_ = backend.KillPod(ctx, pod, ptr.To[int64](0))
				_ = backend.RemovePod(ctx, pod.UID)
			}
		}
		if _, err := os.Stat(outside); err != nil {
			t.Fatalf("the pod's removal reached out of the pod logs directory: %v", err)
		}

		// The truth again: step past every back-off, read the pod and sync
		// until it runs in one ready sandbox.
		h.cri.SetReplyRewriter(nil)
		h.clk.Step(time.Hour)
		var sandboxes, running int
		for round := 0; round < 6; round++ {
			st, err := h.pm.GetPodStatus(ctx, pod.UID, pod.Name, pod.Namespace)
			if err != nil {
				t.Fatalf("honest runtime: read pod: %v", err)
			}
			pleg.Cache().Set(pod.UID, st, nil, h.clk.Now())
			res := backend.SyncPod(ctx, pod)
			drain()
			h.clk.Step(time.Second)
			sandboxes, running = readyCount(t, ctx, honest, pod)
			// A pod that must not restart may have been stopped for good
			// meanwhile (the kubelet gives it no new sandbox once it ran).
			if always := pod.Spec.RestartPolicy == v1.RestartPolicyAlways; sandboxes == 1 && (!always || running == len(pod.Spec.Containers)) || !always && sandboxes == 0 && res.Err == nil && round > 0 {
				break
			}
			if round == 5 {
				t.Fatalf("honest runtime: after %d syncs the pod has %d ready sandboxes and %d of %d containers running in the newest (last sync: %v)",
					round+1, sandboxes, running, len(pod.Spec.Containers), res.Err)
			}
		}

		// Cleanup, which must leave nothing of the pod.
		rp, err := pleg.Cache().Get(pod.UID)
		if err != nil {
			t.Fatal(err)
		}
		if err := backend.KillPod(ctx, pod, ptr.To[int64](0)); err != nil {
			t.Fatalf("honest runtime: kill pod: %v (status %+v)", err, rp)
		}
		if err := backend.RemovePod(ctx, pod.UID); err != nil {
			t.Fatalf("honest runtime: remove pod: %v", err)
		}
		pleg.Relist(ctx)
		drain()
		sel := map[string]string{runtime.LabelPodUID: string(pod.UID)}
		sbs, err := honest.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		cs, err := honest.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		if len(sbs)+len(cs) != 0 {
			t.Fatalf("after RemovePod the runtime still has %d sandboxes and %d containers of the pod", len(sbs), len(cs))
		}
	})
}

// fuzzPod builds the n-th pod from its shape byte: bits 0-1 the restart
// policy, bit 2 an init container, bit 3 a second container, bit 4 host
// network.
func fuzzPod(n int64, shape byte) *v1.Pod {
	name := fmt.Sprintf("fuzz-%d", n)
	pod := newPod(name, ctr("main"))
	pod.Spec.RestartPolicy = []v1.RestartPolicy{v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever, v1.RestartPolicyAlways}[shape&3]
	if shape&4 != 0 {
		pod.Spec.InitContainers = []v1.Container{ctr("init", "true")}
	}
	if shape&8 != 0 {
		pod.Spec.Containers = append(pod.Spec.Containers, ctr("second"))
	}
	pod.Spec.HostNetwork = shape&16 != 0
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	return pod
}

// checkPodStatus checks a status read without error: it is pod's, with no
// nil entries.
func checkPodStatus(t *testing.T, pod *v1.Pod, st *podstate.PodStatus) {
	t.Helper()
	if st == nil || st.ID != pod.UID {
		t.Fatalf("the status of pod %s is %+v", pod.UID, st)
	}
	for i, sb := range st.Sandboxes {
		if sb == nil {
			t.Fatalf("sandbox %d of the status of pod %s is nil", i, pod.UID)
		}
	}
	for i, c := range st.Containers {
		if c == nil {
			t.Fatalf("container %d of the status of pod %s is nil", i, pod.UID)
		}
	}
}

// readyCount returns how many ready sandboxes the runtime really has of pod
// and how many of the pod's containers run in the newest of them.
func readyCount(t *testing.T, ctx context.Context, rs interface {
	ListPodSandbox(context.Context, *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	ListContainers(context.Context, *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
}, pod *v1.Pod) (int, int) {
	t.Helper()
	sel := map[string]string{runtime.LabelPodUID: string(pod.UID)}
	sbs, err := rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: sel, State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}})
	if err != nil {
		t.Fatal(err)
	}
	if len(sbs) == 0 {
		return 0, 0
	}
	newest := sbs[0]
	for _, sb := range sbs {
		if sb.CreatedAt > newest.CreatedAt {
			newest = sb
		}
	}
	cs, err := rs.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: newest.Id, LabelSelector: sel, State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, c := range cs {
		names[c.GetMetadata().GetName()] = true
	}
	running := 0
	for _, c := range pod.Spec.Containers {
		if names[c.Name] {
			running++
		}
	}
	return len(sbs), running
}

// fuzzBytes hands out the input one byte at a time, then zeros.
type fuzzBytes struct {
	data []byte
	pos  int
}

func (b *fuzzBytes) next() byte {
	if b.pos >= len(b.data) {
		return 0
	}
	b.pos++
	return b.data[b.pos-1]
}

func (b *fuzzBytes) done() bool { return b.pos >= len(b.data) }

// replyFuzzer rewrites CRI replies as its input says (see FuzzCRIReplies).
type replyFuzzer struct {
	mu  sync.Mutex
	in  *fuzzBytes
	ids []string // IDs seen in replies, to answer with the wrong one
}

func (r *replyFuzzer) rewrite(method string, _ any, reply proto.Message) (proto.Message, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.collectIDs(reply.ProtoReflect(), 0)
	op := r.in.next()
	switch {
	case op < 128:
		return reply, nil
	case op < 144:
		code := codes.Code(1 + r.in.next()%16)
		return nil, status.Errorf(code, "fuzz: %s fails with %s", method, code)
	case op < 152:
		return reply.ProtoReflect().Type().New().Interface(), nil
	}
	for range 1 + op%4 {
		r.mutate(reply.ProtoReflect(), 0)
	}
	return reply, nil
}

func (r *replyFuzzer) collectIDs(m protoreflect.Message, depth int) {
	if depth > 4 || len(r.ids) >= 64 {
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				r.collectIDs(v.List().Get(i).Message(), depth+1)
			}
		case fd.IsMap():
		case fd.Message() != nil:
			r.collectIDs(v.Message(), depth+1)
		case fd.Kind() == protoreflect.StringKind && strings.HasSuffix(string(fd.Name()), "id") && v.String() != "":
			r.ids = append(r.ids, v.String())
		}
		return true
	})
}

// mutate changes one field of m, or of a message below it.
func (r *replyFuzzer) mutate(m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	if fields.Len() == 0 {
		return
	}
	fd := fields.Get(int(r.in.next()) % fields.Len())
	switch {
	case fd.IsList():
		l := m.Mutable(fd).List()
		i := 0
		if l.Len() > 0 {
			i = int(r.in.next()) % l.Len()
		}
		switch op := r.in.next() % 5; {
		case op == 0:
			m.Clear(fd)
		case op == 1 && l.Len() > 0:
			v := l.Get(i)
			if fd.Message() != nil {
				v = protoreflect.ValueOfMessage(proto.Clone(v.Message().Interface()).ProtoReflect())
			}
			l.Append(v)
		case op == 2 && l.Len() > 0:
			l.Set(i, l.Get(l.Len()-1))
			l.Truncate(l.Len() - 1)
		case op == 3 && l.Len() > 0:
			if fd.Message() != nil {
				if depth < 6 {
					r.mutate(l.Get(i).Message(), depth+1)
				}
			} else {
				l.Set(i, r.scalar(fd))
			}
		case op == 4:
			if fd.Message() != nil {
				e := l.NewElement()
				if depth < 6 {
					r.mutate(e.Message(), depth+1)
				}
				l.Append(e)
			} else {
				l.Append(r.scalar(fd))
			}
		}
	case fd.IsMap():
		mp := m.Mutable(fd).Map()
		var keys []protoreflect.MapKey
		mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
			keys = append(keys, k)
			return true
		})
		op := r.in.next() % 4
		switch {
		case op == 0:
			m.Clear(fd)
		case op == 1 && len(keys) > 0:
			mp.Clear(keys[int(r.in.next())%len(keys)])
		case op == 2 && len(keys) > 0 && fd.MapValue().Kind() == protoreflect.StringKind:
			mp.Set(keys[int(r.in.next())%len(keys)], r.scalar(fd.MapValue()))
		case fd.MapKey().Kind() == protoreflect.StringKind && fd.MapValue().Kind() == protoreflect.StringKind:
			mp.Set(protoreflect.ValueOfString(r.str(r.in.next())).MapKey(), r.scalar(fd.MapValue()))
		}
	case fd.Message() != nil:
		if r.in.next()%3 == 0 || depth >= 6 {
			m.Clear(fd)
		} else {
			r.mutate(m.Mutable(fd).Message(), depth+1)
		}
	default:
		m.Set(fd, r.scalar(fd))
	}
}

var (
	fuzzInts = []int64{0, -1, 1, 2, 137, math.MaxInt64, math.MinInt64, math.MaxInt32, math.MinInt32,
		t0.UnixNano(), t0.Add(time.Hour).UnixNano(), t0.Add(-time.Hour).UnixNano(), 1 << 62, 253402300800}
	fuzzStrings = []string{"", "main", "second", "init", "default", "fuzz-1", "uid-fuzz-1", "0", "-1", "99999999999999999999",
		"not-a-number", "10.88.0.7", "::1", "fe80::1%eth0", "999.1.1.1", "not-an-ip", "/", "/dev/null", "/nonexistent/0.log",
		"../../../../tmp", "../outside", "a/../../b", "sha256:0000", "docker.io/library/busybox:latest", "CONTAINER_RUNNING",
		"ünï\u0000cödé", strings.Repeat("x", 4096), "{\"a\":", "io.kubernetes.pod.uid", "io.kubernetes.container.name",
		"io.kubernetes.container.hash", "io.kubernetes.container.restartCount", "io.kubernetes.pod.terminationGracePeriod",
		"io.kubernetes.container.terminationMessagePath", "io.kubernetes.container.preStopHandler", `{"exec":{"command":["true"]}}`}
)

func (r *replyFuzzer) str(b byte) string {
	i := int(b)
	if i < len(fuzzStrings) || len(r.ids) == 0 {
		return fuzzStrings[i%len(fuzzStrings)]
	}
	return r.ids[i%len(r.ids)]
}

func (r *replyFuzzer) scalar(fd protoreflect.FieldDescriptor) protoreflect.Value {
	b := r.in.next()
	i := fuzzInts[int(b)%len(fuzzInts)]
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(b&1 == 1)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(protoreflect.EnumNumber(int32(int8(b))))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(i))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(i))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(i)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(i))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32([]float32{0, -1, float32(math.NaN()), float32(math.Inf(1))}[b%4])
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64([]float64{0, -1, math.NaN(), math.Inf(-1)}[b%4])
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(r.str(b))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(fuzzStrings[int(b)%len(fuzzStrings)]))
	}
	return fd.Default()
}
