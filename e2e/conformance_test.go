package e2e

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nodekit/nodekit/internal/testenv"

	"github.com/nodekit/nodekit/e2e/cluster"
	"github.com/nodekit/nodekit/e2e/conformance"
)

// conformanceSubset are upstream [sig-node] [Conformance] and
// [NodeConformance] tests (e2e.test of the pinned Kubernetes) that CI runs
// against a nodekit node: tests that pass on nodekit and on the kubelet
// here, chosen to cover the pod lifecycle, container status, probes,
// lifecycle hooks, init containers, the downward API, configMap/secret
// environment (envFrom names that are not shell identifiers: the busybox
// image's upstream ash), security context, exec through the kubelet API,
// an image volume pulled with policy Always (the harness's registry),
// in-place resize and spec.hostnameOverride, within a few minutes. cmd/conformance runs
// the whole focus.
var conformanceSubset = []string{
	"[sig-node] Pods should get a host IP [Conformance] [NodeConformance]",
	"[sig-node] Pods should be submitted and removed [Conformance] [NodeConformance]",
	"[sig-node] Pods should support remote command execution over websockets [Conformance] [NodeConformance]",
	"[sig-node] Pods should support retrieving logs from the container over websockets [Conformance] [NodeConformance]",
	"[sig-node] Container Runtime blackbox test when starting a container that exits should run with the expected status [Conformance] [NodeConformance]",
	"[sig-node] Container Runtime blackbox test on terminated container should report termination message from log output if TerminationMessagePolicy FallbackToLogsOnError is set [Conformance] [NodeConformance]",
	"[sig-node] Containers should be able to override the image's default command and arguments [Conformance] [NodeConformance]",
	"[sig-node] Downward API should provide pod name, namespace and IP address as env vars [Conformance] [NodeConformance]",
	"[sig-node] ConfigMap should be consumable via environment variable [Conformance] [NodeConformance]",
	"[sig-node] ConfigMap should be consumable via the environment [Conformance] [NodeConformance]",
	"[sig-node] Secrets should be consumable from pods in env vars [Conformance] [NodeConformance]",
	"[sig-node] InitContainer should invoke init containers on a RestartNever pod [Conformance] [NodeConformance]",
	"[sig-node] Container Lifecycle Hook when create a pod with lifecycle hook should execute poststart http hook properly [Conformance] [NodeConformance]",
	"[sig-node] Security Context When creating a container with runAsUser should run the container with uid 65534 [LinuxOnly] [Conformance] [NodeConformance]",
	"[sig-node] Variable Expansion should allow composing env vars into new env vars [Conformance] [NodeConformance]",
	"[sig-node] Kubelet when scheduling a busybox command that always fails in a pod should have an terminated reason [Conformance] [NodeConformance]",
	"[sig-node] ImageVolume should succeed with pod and pull policy of Always [LinuxOnly] [MinimumKubeletVersion:1.35] [Conformance]",
	"[sig-node] Pod InPlace Resize Container burstable pods - extended 6 containers - various operations performed (including adding limits and requests) [MinimumKubeletVersion:1.34] [Conformance]",
	"[sig-node] Override hostname of Pod a pod with only hostnameOverride field will have hostnameOverride as hostname [NodeConformance]",
}

// TestConformanceSubset runs conformanceSubset with upstream's e2e.test
// against one node run by nodekit's agent on containerd, under a control
// plane of its own (the framework needs a cluster whose only node is the
// one under test), and fails for every test that does not pass, or that
// did not run. It is not parallel: it runs before the parallel tests, so
// its timeouts meet a quiet machine.
func TestConformanceSubset(t *testing.T) {
	requireContainerd(t)
	ctx := t.Context()
	src, err := cluster.LocateSource()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := cluster.BuildConformance(ctx, cluster.BuildOptions{Source: src, Log: progress}); err != nil {
		if testenv.InCI() {
			t.Fatalf("build e2e.test (required under CI): %v", err)
		}
		t.Skipf("cannot build e2e.test: %v", err)
	}
	t.Logf("e2e.test ready in %s", time.Since(start).Round(time.Second))

	// The focus is each name up to its first tag: ginkgo matches it
	// against the spec's text, whose tags may be labels.
	quoted := make([]string, len(conformanceSubset))
	for i, name := range conformanceSubset {
		rest, _ := strings.CutPrefix(name, "[sig-node] ")
		if i := strings.Index(rest, " ["); i >= 0 {
			rest = rest[:i]
		}
		quoted[i] = regexp.QuoteMeta(rest)
	}
	report, err := conformance.Run(ctx, conformance.Options{
		Focus:   `\[sig-node\] (` + strings.Join(quoted, "|") + `)`,
		Agents:  []conformance.Agent{conformance.Nodekit},
		Procs:   2,
		Timeout: 10 * time.Minute,
		// A short name: the node's unix sockets (device-plugins/kubelet.sock)
		// must fit the 108 bytes of sun_path below it.
		Dir:    filepath.Join(env.dir, "cf"),
		Source: src,
		Log:    progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	res := report.Result(conformance.Nodekit)
	ran := map[string]bool{}
	for _, c := range res.Cases {
		ran[c.Name] = true
		switch c.State {
		case conformance.Passed:
		case conformance.Skipped:
			t.Errorf("%s: skipped: %s", c.Name, c.FirstLine())
		default:
			t.Errorf("%s: %s: %s", c.Name, c.State, c.Reason)
		}
	}
	for _, name := range conformanceSubset {
		if !ran[name] {
			t.Errorf("%s: did not run (renamed upstream? update conformanceSubset)", name)
		}
	}
	t.Logf("%d upstream conformance tests passed on nodekit in %s (e2e.test output and JUnit report in %s)",
		res.Count(conformance.Passed), res.Duration.Round(time.Second), res.Dir)
}
