package conformance

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// sampleJUnit has the shape of e2e.test's junit_01.xml (ginkgo's JUnit
// reporter with the framework's configuration: no failure message
// attribute, the failure in the element's text).
const sampleJUnit = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="6" disabled="2" errors="0" failures="2" time="40.1">
  <testsuite name="Kubernetes e2e suite" package="/" tests="6" disabled="0" skipped="2" errors="0" failures="2" time="40.1">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="0.5"></testcase>
    <testcase name="[It] [sig-node] Pods should get a host IP [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" status="passed" time="4.25"></testcase>
    <testcase name="[It] [sig-node] Pods should be updated [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" status="failed" time="30">
      <failure message="" type="failed">[FAILED] wait for pod &#34;pod-update&#34; to be running: timed out
more detail
In [It] at: test/e2e/common/node/pods.go:123 @ 12/06/26 03:30:00.000
</failure>
      <system-err>timeline</system-err>
    </testcase>
    <testcase name="[It] [sig-node] Probing container should be restarted [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" status="timedout" time="5">
      <failure message="" type="timedout">[TIMEDOUT] A suite timeout occurred</failure>
    </testcase>
    <testcase name="[It] [sig-storage] ConfigMap should be consumable [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
    <testcase name="[It] [sig-node] Sysctls should reject invalid sysctls" classname="Kubernetes e2e suite" status="skipped" time="0.1">
      <skipped message="skipped - Only supported for node OS distro [gci ubuntu] (not debian)"></skipped>
    </testcase>
    <testcase name="[ReportAfterSuite] Kubernetes e2e suite report" classname="Kubernetes e2e suite" status="passed" time="0"></testcase>
  </testsuite>
</testsuites>`

func TestParseJUnit(t *testing.T) {
	cases, err := parseJUnit(strings.NewReader(sampleJUnit))
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Name, State, First string
		Duration           time.Duration
	}
	var got []row
	for _, c := range cases {
		got = append(got, row{c.Name, string(c.State), c.FirstLine(), c.Duration})
	}
	want := []row{
		{"[sig-node] Pods should get a host IP [NodeConformance] [Conformance]", "passed", "", 4250 * time.Millisecond},
		{"[sig-node] Pods should be updated [NodeConformance] [Conformance]", "failed", `wait for pod "pod-update" to be running: timed out`, 30 * time.Second},
		{"[sig-node] Probing container should be restarted [NodeConformance] [Conformance]", "failed", "A suite timeout occurred", 5 * time.Second},
		{"[sig-node] Sysctls should reject invalid sysctls", "skipped", "Only supported for node OS distro [gci ubuntu] (not debian)", 100 * time.Millisecond},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseJUnit (-want +got):\n%s", diff)
	}
}

func TestParseJUnitKeepsAFailedSuiteSetup(t *testing.T) {
	const doc = `<testsuites><testsuite>
<testcase name="[SynchronizedBeforeSuite]" status="failed" time="60"><failure type="failed">[FAILED] Error waiting for all pods to be running and ready</failure></testcase>
<testcase name="[It] [sig-node] Pods should get a host IP" status="skipped"><skipped message="skipped"></skipped></testcase>
</testsuite></testsuites>`
	cases, err := parseJUnit(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) != 1 || cases[0].State != Failed || cases[0].FirstLine() != "Error waiting for all pods to be running and ready" {
		t.Fatalf("cases = %+v, want the failed [SynchronizedBeforeSuite] alone", cases)
	}
}

func TestParseJUnitRejectsGarbage(t *testing.T) {
	if _, err := parseJUnit(strings.NewReader("not xml")); err == nil {
		t.Fatal("parseJUnit accepted a document that is not XML")
	}
}

func TestWriteMarkdown(t *testing.T) {
	host := "[sig-node] Pods should get a host IP [Conformance]"
	update := "[sig-node] Pods should be updated [Conformance]"
	dns := "[sig-node] Pods should resolve a|b [Conformance]"
	r := &Report{
		KubernetesVersion: "v1.37.2", Focus: SigNodeConformance,
		Results: []*Result{
			{Agent: Nodekit, Duration: 90 * time.Second, Cases: []Case{
				{Name: host, State: Passed},
				{Name: update, State: Failed, Reason: "[FAILED] pod never ran\nstack"},
				{Name: dns, State: Failed, Reason: "no DNS"},
			}},
			{Agent: Kubelet, Duration: 80 * time.Second, Cases: []Case{
				{Name: host, State: Passed},
				{Name: update, State: Passed},
				{Name: dns, State: Failed, Reason: "[FAILED] lookup failed: no server"},
			}},
		},
	}
	var b strings.Builder
	if err := r.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"- nodekit: 1 passed, 2 failed, 0 skipped of 3 (1m30s)\n",
		"- kubelet: 2 passed, 1 failed, 0 skipped of 3 (1m20s)\n",
		"- nodekit-only failures: 1\n",
		"| [sig-node] Pods should be updated [Conformance] | passed | failed | nodekit only: pod never ran |\n",
		"| [sig-node] Pods should get a host IP [Conformance] | passed | passed |  |\n",
		`| [sig-node] Pods should resolve a\|b [Conformance] | failed | failed | fails on both: lookup failed: no server |` + "\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, b.String())
		}
	}
	if got := r.NodekitOnlyFailures(); len(got) != 1 || got[0].Name != update {
		t.Errorf("NodekitOnlyFailures = %+v, want only %q", got, update)
	}
}

func TestResultMerge(t *testing.T) {
	r := &Result{Agent: Nodekit, Duration: time.Minute, Cases: []Case{
		{Name: "a", State: Passed},
		{Name: "b", State: Failed, Reason: "[TIMEDOUT] suite timeout"},
	}}
	r.Merge(&Result{Agent: Nodekit, Duration: 2 * time.Minute, Cases: []Case{
		{Name: "b", State: Passed},
		{Name: "c", State: Failed, Reason: "no"},
	}})
	want := []Case{{Name: "a", State: Passed}, {Name: "b", State: Passed}, {Name: "c", State: Failed, Reason: "no"}}
	if !reflect.DeepEqual(r.Cases, want) || r.Duration != 3*time.Minute {
		t.Errorf("merged = %+v in %s, want %+v in 3m", r.Cases, r.Duration, want)
	}
}
