package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// soak reports whether the long versions of the reliability tests run
// (NODEKIT_SOAK=1, as hack/soak.sh sets): churn of 2,000 pods × 5 on
// fakecri and 200 × 5 on containerd instead of the CI's 100 × 3 and 20 × 2.
func soak() bool {
	on, _ := strconv.ParseBool(os.Getenv("NODEKIT_SOAK"))
	return on
}

// soakSize returns the soak's pods per round and rounds: pods and rounds,
// or NODEKIT_SOAK_PODS and NODEKIT_SOAK_ROUNDS where set (a shorter soak;
// a positive integer, else the test fails).
func soakSize(t *testing.T, pods, rounds int) (int, int) {
	t.Helper()
	for _, v := range []struct {
		env string
		n   *int
	}{{"NODEKIT_SOAK_PODS", &pods}, {"NODEKIT_SOAK_ROUNDS", &rounds}} {
		s := os.Getenv(v.env)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive integer", v.env, s)
		}
		*v.n = n
	}
	return pods, rounds
}

// pick returns long under NODEKIT_SOAK and short otherwise.
func pick[T any](short, long T) T {
	if soak() {
		return long
	}
	return short
}

// TestChurn creates pods on one node, waits until all run, deletes them
// all and waits until they are gone, several rounds; the apiserver must
// have denied none of the node's requests, reads included, and the node
// must have read none of the pods (a GET of each before its final status
// cost a third of the deletion's time at the client's rate limit); then
// the node must hold nothing of them (no sandbox, container, pod or log
// directory, pod cgroup on containerd) and the agent no more goroutines or
// open files than when it was idle before the first round.
//
// Its live heap, read right after a forced collection after every round,
// may grow only by what fills to a fixed size: client-go's event
// correlator, which the kubelet uses too, keeps the last 4,096 event keys
// and events and one spam-filter entry (a rate limiter) for each of the
// last 4,096 objects: 8.2 MiB when full in the soak's heap profiles
// (2,000 × 5 pods of four events each: 4.1 MiB aggregation, 3.1 MiB spam
// filter, 1.0 MiB event log). So, from the first round to the last, at
// most churnHeapFill; and from the round after which 4,096 pods have
// passed (the caches full) to the last, at most churnHeapSteady: a leak of
// 1 KiB a pod is 4 MiB over the soak's last two rounds of 2,000 pods (the
// soak measured +0.1 MiB). CI's short runs (100 pods × 3 rounds on
// fakecri, 20 × 2 on containerd) never fill the caches, and churn too few
// pods to see a leak that small; NODEKIT_SOAK=1 (hack/soak.sh) runs 2,000
// × 5 and 200 × 5 (1,000 pods in all never fill the caches either). The
// live heap must also stay within churnHeapIdle of its idle figure: the
// full caches, the capacity Go's maps keep after a round's peak of 2,000
// pods and /metrics' pooled gzip writer (1.8 MiB, alive from one scrape
// to the next collection) took 16.4 MiB. It prints each round's times and
// the agent's figures, and leaves a heap profile of the agent after each
// round in the run's directory (go tool pprof -base to compare).
// NODEKIT_SOAK_PODS and NODEKIT_SOAK_ROUNDS shorten the soak (see
// soakSize). The short subtests run beside the rest of the suite; the
// soak's run one after the other, since either alone fills two cores.
func TestChurn(t *testing.T) {
	t.Run("fakecri", func(t *testing.T) {
		count, rounds := 100, 3
		if soak() {
			count, rounds = soakSize(t, 2000, 5)
		} else {
			t.Parallel()
		}
		churn(t, relOptions{fake: true}, count, rounds)
	})
	t.Run("containerd", func(t *testing.T) {
		requireContainerd(t)
		count, rounds := 20, 2
		if soak() {
			count, rounds = soakSize(t, 200, 5)
		} else {
			t.Parallel()
		}
		churn(t, relOptions{}, count, rounds)
	})
}

// The live heap bounds of the churn (see TestChurn): churnHeapFill from
// the first round to the last, churnHeapSteady from the round after which
// the event correlator's caches are full (churnCorrelatorObjects pods seen)
// to the last, churnHeapIdle from idle to the end.
const (
	churnHeapFill          = 9 << 20
	churnHeapSteady        = 1 << 20
	churnHeapIdle          = 20 << 20
	churnCorrelatorObjects = 4096
)

// agentFigures are what churn compares before and after: live is the
// heap's objects right after a collection (go_memstats_heap_alloc_bytes),
// spans the heap's spans in use (go_memstats_heap_inuse_bytes), which a
// peak of pods leaves partly filled; rss is the process's resident memory
// (process_resident_memory_bytes), reported, not bounded.
type agentFigures struct{ goroutines, fds, live, spans, rss float64 }

func (f agentFigures) String() string {
	return fmt.Sprintf("%.0f goroutines, %.0f fds, live heap %s (spans in use %s), RSS %s", f.goroutines, f.fds, mibytes(f.live), mibytes(f.spans), mibytes(f.rss))
}

func churn(t *testing.T, o relOptions, count, rounds int) {
	ctx := t.Context()
	name := "churn-containerd"
	if o.fake {
		name = "churn-fake"
	}
	o.extraArgs = append(o.extraArgs, fmt.Sprintf("--max-pods=%d", count+10))
	n := newRelNode(t, name, o)
	// read reads the agent's figures as they are; figures first collects
	// its garbage (a heap profile with gc=1, kept in the run's directory
	// as file), so live is what it keeps.
	read := func() agentFigures {
		m, err := n.agent.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return agentFigures{m.Sum("go_goroutines", nil), m.Sum("process_open_fds", nil), m.Sum("go_memstats_heap_alloc_bytes", nil), m.Sum("go_memstats_heap_inuse_bytes", nil), m.Sum("process_resident_memory_bytes", nil)}
	}
	figures := func(file string) agentFigures {
		path := filepath.Join(env.dir, name+"."+file+".heap.pprof")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		err = n.agent.Profile(ctx, env.cp.PKI, "heap?gc=1", f)
		f.Close()
		if err != nil {
			t.Fatalf("heap profile of the agent: %v", err)
		}
		return read()
	}
	time.Sleep(5 * time.Second)
	idle := figures("idle")
	// settle waits until the agent holds goroutines and fds within a few of
	// idle (the API and runtime connections may have been redialled): its
	// last pods' workers are gone.
	var settled agentFigures
	settle := func() bool {
		err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
			settled = read()
			return settled.goroutines <= idle.goroutines+10 && settled.fds <= idle.fds+10, nil
		})
		return err == nil
	}

	// A round's pods must run, and be gone, within the CI's two pod
	// timeouts, or the soak's 15 minutes (2,000 pods take one status
	// write each at the default 50 requests a second, and as many deletes).
	timeout := pick(2*podTimeout, 15*time.Minute)
	var rows []string
	// each holds the agent's figures after each round (heap profiles
	// roundN in the run's directory).
	each := make([]agentFigures, rounds)
	for round := range rounds {
		start := time.Now()
		names := createPods(t, count, fmt.Sprintf("r%d", round), func(name string) *v1.Pod { return withGrace(n.pod(name, sleeper...), 1) })
		waitPods(t, n.ns, names, "Running", timeout, func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		running := time.Since(start)
		start = time.Now()
		deletePods(t, n.ns, names)
		waitPodsGone(t, n.ns, names, timeout)
		gone := time.Since(start)
		// Compared once the agent has wound the round down: right after
		// the API objects are gone, the last pods' workers still tear
		// down (on containerd, 200 pods' held 190 goroutines and 6 MiB).
		settle()
		each[round] = figures(fmt.Sprintf("round%d", round+1))
		rows = append(rows, fmt.Sprintf("round %d: %d Running in %s, gone in %s; then %s", round+1, count, running.Round(100*time.Millisecond), gone.Round(100*time.Millisecond), each[round]))
	}
	first := each[0]

	// Nothing left on the node.
	var left []string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(context.Context) (bool, error) {
		left = n.nodeLeftovers(t)
		return len(left) == 0, nil
	})
	if err != nil {
		if len(left) > 10 {
			left = append(left[:10], fmt.Sprintf("… and %d more", len(left)-10))
		}
		t.Errorf("after %d × %d pods the node still holds:\n  %s", rounds, count, strings.Join(left, "\n  "))
	}
	// Every request the node made was allowed: no status read or written
	// for a pod whose object is gone (the Node authorizer refuses both).
	// And none was a GET of a churned pod: the agent writes a pod's status
	// from its watch's copy, or the last write's answer, whichever is newer,
	// so a pod costs a status PATCH or two and the final DELETE (a GET
	// before each terminal status made 1,000 deletions take 60 s instead of
	// 40 at the default 50 requests a second).
	var denied, gets []string
	verbs := map[string]int{}
	for _, r := range readAuditRecords(t) {
		if r.User.Username != "system:node:"+n.name {
			continue
		}
		if r.Code == 403 {
			denied = append(denied, r.String())
		}
		if o := r.ObjectRef; o != nil && o.Resource == "pods" && o.Namespace == n.ns && o.Name != "" {
			verbs[r.Verb]++
			if r.Verb == "get" {
				gets = append(gets, r.String())
			}
		}
	}
	if len(denied) > 0 {
		t.Errorf("the apiserver denied %d requests of the node during the churn:\n  %s", len(denied), strings.Join(denied, "\n  "))
	}
	if len(gets) > 0 {
		t.Errorf("the node read %d of the churn's pods (one GET each costs a request of its rate limit):\n  %s", len(gets), strings.Join(gets[:min(len(gets), 10)], "\n  "))
	}
	t.Logf("requests of the node denied during the churn: %d; its requests on the %d pods churned: %d get, %d patch, %d delete", len(denied), rounds*count, verbs["get"], verbs["patch"], verbs["delete"])
	// The agent back to idle: goroutines and fds within a few of the
	// baseline (the API and runtime connections may have been redialled)
	// once its last pods' workers are gone, the live heap as above.
	if !settle() {
		t.Errorf("after %d × %d pods the agent holds %s, idle it held %s", rounds, count, settled, idle)
	}
	after := figures("after")
	last := each[rounds-1]
	if last.live > first.live+churnHeapFill {
		t.Errorf("the agent's live heap grew from %s after the first round to %s after the last, more than the event correlator's caches take: something is kept per pod", mibytes(first.live), mibytes(last.live))
	}
	// full is the round after which the caches are full.
	if full := (churnCorrelatorObjects+count-1)/count - 1; full < rounds-1 && last.live > each[full].live+churnHeapSteady {
		t.Errorf("the agent's live heap grew from %s after round %d, the event correlator's caches full, to %s after round %d: something is kept per pod", mibytes(each[full].live), full+1, mibytes(last.live), rounds)
	}
	if after.live > idle.live+churnHeapIdle {
		t.Errorf("after %d × %d pods the agent's live heap is %s, idle it was %s", rounds, count, mibytes(after.live), mibytes(idle.live))
	}
	t.Logf("%s; idle %s; afterwards %s; nothing left on the node; heap profiles in %s", strings.Join(rows, "; "), idle, after, env.dir)
}

// deletePods deletes the named pods gracefully, concurrently.
func deletePods(t *testing.T, ns string, names []string) {
	t.Helper()
	errs := make(chan error, len(names))
	sem := make(chan struct{}, 10)
	for _, name := range names {
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs <- env.cp.Client().CoreV1().Pods(ns).Delete(context.WithoutCancel(t.Context()), name, metav1.DeleteOptions{})
		}()
	}
	for range names {
		if err := <-errs; err != nil {
			t.Fatalf("delete pod: %v", err)
		}
	}
}

// nodeLeftovers lists every pod trace on the node: sandboxes and
// containers in its runtime, pod and log directories, and pod cgroups
// under its cgroup root (containerd nodes).
func (n *podNode) nodeLeftovers(t *testing.T) []string {
	t.Helper()
	var left []string
	sbs, err := n.cri.ListPodSandbox(t.Context(), &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		t.Fatalf("CRI ListPodSandbox of %s: %v", n.name, err)
	}
	for _, sb := range sbs.Items {
		left = append(left, fmt.Sprintf("sandbox %s of pod %s/%s", sb.Id, sb.Metadata.GetNamespace(), sb.Metadata.GetName()))
	}
	cs, err := n.cri.ListContainers(t.Context(), &runtimeapi.ListContainersRequest{})
	if err != nil {
		t.Fatalf("CRI ListContainers of %s: %v", n.name, err)
	}
	for _, c := range cs.Containers {
		left = append(left, fmt.Sprintf("container %s (%s)", c.Id, c.Metadata.GetName()))
	}
	for _, pattern := range []string{
		filepath.Join(n.agent.Dir, "root", "pods", "*"),
		filepath.Join(n.agent.Dir, "pod-logs", "*"),
	} {
		matches, _ := filepath.Glob(pattern)
		for _, m := range matches {
			left = append(left, "directory "+m)
		}
	}
	if n.cgroupRoot != "" {
		for _, controller := range []string{"memory", "cpu", "pids"} {
			base := filepath.Join("/sys/fs/cgroup", controller, n.cgroupRoot, "kubepods")
			for _, pattern := range []string{"pod*", "*/pod*"} {
				matches, _ := filepath.Glob(filepath.Join(base, pattern))
				for _, m := range matches {
					left = append(left, "cgroup "+m)
				}
			}
		}
	}
	return left
}
