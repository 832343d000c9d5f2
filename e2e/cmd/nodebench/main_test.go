package main

import (
	"bytes"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nodekit/nodekit/internal/testenv"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// TestQuickRunProducesFigures runs the benchmark in its quickest mode
// against the real control plane and checks that every figure of that mode
// was measured. It asserts nothing about the values: timing is what the
// command reports, not what tests judge.
func TestQuickRunProducesFigures(t *testing.T) {
	if _, err := cluster.BuildControlPlane(t.Context(), cluster.BuildOptions{}); err != nil {
		testenv.Unavailable(t, "control plane unavailable: %v", err)
	}
	// The default file system where this machine can make it; the run's
	// directory's own where it cannot (TestLoopFSUnavailableNamesTheCause
	// covers that error).
	args, fsNote := []string{"-quick", "-dir", t.TempDir()}, "file system: -fs=ext4: the nodes' state on ext4 with a journal (/dev/loop"
	if err := cluster.CheckLoopFS(); err != nil {
		t.Logf("-fs=host: %v", err)
		args, fsNote = append(args, "-fs=host"), "file system: -fs=host: "
	}
	var out, progress bytes.Buffer
	err := run(t.Context(), args, &out, &progress)
	t.Logf("table:\n%s", out.String())
	if err != nil {
		t.Fatalf("nodebench -quick: %v\nprogress:\n%s", err, progress.String())
	}
	if !strings.Contains(out.String(), fsNote) {
		t.Errorf("the table does not say %q", fsNote)
	}
	// The rows -quick measures (fakecri and the in-process fleet).
	for _, metric := range []string{
		"10 pods at once, fakecri: bound → Running",
		"10 pods at once, fakecri: create → Running",
		"10 pods at once, fakecri: agent CPU",
		"10 pods at once, fakecri: agent API requests",
		"start → Ready, fakecri, agent registers the Node",
		"start → Ready, fakecri, Node pre-registered",
		"RSS idle, fakecri",
		"RSS idle, fakecri: anonymous / file-backed",
		"RSS with 10 pods running, fakecri",
		"idle CPU, fakecri",
		"nb-fakecri: Lease updates",
		"nb-fakecri: all API requests",
		"3 agents in one process, fakecri: first start → all Ready",
		"3 agents in one process, fakecri: process RSS",
	} {
		line := findLine(out.String(), metric)
		if line == "" {
			t.Errorf("no row %q", metric)
			continue
		}
		if v := nodekitCell(line); v == "" || v == notRun || strings.Contains(v, "n/a") {
			t.Errorf("row %q has no figure: %s", metric, line)
		}
	}
	// The modes -quick leaves out say so instead of printing figures.
	if line := findLine(out.String(), "pods at once, containerd: create → Running p50"); nodekitCell(line) != notRun {
		t.Errorf("containerd row without containerd: %s", line)
	}
	if line := findLine(out.String(), "pods with a CSI volume each, containerd: pod bound → volume published"); nodekitCell(line) != notRun {
		t.Errorf("CSI row without containerd: %q", line)
	}
	if !strings.Contains(out.String(), "kubelet anchor not measured: -kubelet=false") {
		t.Error("the table does not say the kubelet was not measured")
	}
}

// columns splits a table line into its cells (separated by two or more
// spaces; cells hold single spaces only).
var columns = regexp.MustCompile(`\s{2,}`)

// nodekitCell returns the NODEKIT cell of a table line.
func nodekitCell(line string) string {
	cells := columns.Split(strings.TrimSpace(line), -1)
	if len(cells) < 2 {
		return ""
	}
	return cells[1]
}

func findLine(table, prefix string) string {
	for _, line := range strings.Split(table, "\n") {
		if strings.Contains(line, prefix) {
			return line
		}
	}
	return ""
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-quick", "-pods=20"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.fakePods != 20 || o.nodes != 3 || o.containerd != "off" || o.kubelet || o.startRuns != 1 {
		t.Errorf("-quick -pods=20 = %+v: want the explicit -pods kept and the quick defaults for the rest", o)
	}
	o, err = parseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.fakePods != 100 || o.containerdPods != 30 || o.nodes != 100 || o.containerd != "auto" || !o.kubelet || o.csiPods != 5 || o.fs != fsExt4 {
		t.Errorf("defaults = %+v", o)
	}
	o, err = parseFlags([]string{"-fleet-only", "-nodes=1000", "-containerd=on"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !o.fleetOnly || o.nodes != 1000 || o.containerd != "off" || o.kubelet {
		t.Errorf("-fleet-only -nodes=1000 -containerd=on = %+v: want containerd off and no kubelet", o)
	}
	for _, args := range [][]string{
		{"-fleet-only", "-nodes=0"}, {"-containerd=maybe"}, {"-fs=xfs"}, {"-pods=0"}, {"-idle=10ms"}, {"-start-runs=0"}, {"-nodes=-1"}, {"-csi-pods=-1"}, {"-fleet-memory-max=-1"}, {"-fleet-start-memory=-1"}, {"extra"},
	} {
		if _, err := parseFlags(args, &bytes.Buffer{}); err == nil {
			t.Errorf("parseFlags(%q): no error", args)
		}
	}
}

// TestLoopFSUnavailableNamesTheCause runs nodebench where it cannot make
// its file system (no mkfs.ext4 on PATH; without root, that too): it fails
// before it starts anything, naming what is missing and -fs=host.
func TestLoopFSUnavailableNamesTheCause(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	dir := t.TempDir()
	var out, progress bytes.Buffer
	err := run(t.Context(), []string{"-quick", "-dir", dir}, &out, &progress)
	if err == nil {
		t.Fatalf("nodebench without mkfs.ext4 ran:\n%s", out.String())
	}
	for _, want := range []string{"-fs=ext4", "mkfs.ext4 on PATH", "-fs=host"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, statErr := os.Stat(filepath.Join(dir, nodeFSName+".img")); !errors.Is(statErr, fs.ErrNotExist) {
		t.Errorf("an image file was made: %v", statErr)
	}
	if !strings.Contains(out.String(), "file system: not made") {
		t.Errorf("the table does not say the file system was not made:\n%s", out.String())
	}
}

// TestReportCSI checks the CSI rows: each segment's p50 / p99 from the
// samples, the kubelet column saying the anchor does not run it.
func TestReportCSI(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	b := &benchmark{opts: options{csiPods: 3}, csi: &csiFigures{
		boundToPublished:   ms(30, 10, 20),
		publishedToRunning: ms(200, 100, 300),
		boundToRunning:     ms(230, 110, 320),
	}}
	b.reportCSI()
	want := map[string]string{
		"3 pods with a CSI volume each, containerd: pod bound → volume published p50/p99": "20 ms / 30 ms",
		"3 pods with a CSI volume each, containerd: volume published → Running p50/p99":   "200 ms / 300 ms",
		"3 pods with a CSI volume each, containerd: pod bound → Running p50/p99":          "230 ms / 320 ms",
	}
	if len(b.table.Rows) != len(want) {
		t.Fatalf("rows = %+v, want %d", b.table.Rows, len(want))
	}
	for _, r := range b.table.Rows {
		if want[r.Metric] != r.Value || r.Kubelet != "nodekit only" {
			t.Errorf("row %+v: want value %q, kubelet \"nodekit only\"", r, want[r.Metric])
		}
	}
	b = &benchmark{opts: options{csiPods: 3}, csiSkipped: "-csi-pods=0"}
	b.reportCSI()
	if b.table.Rows[0].Value != notRun || len(b.table.Notes) != 1 || !strings.Contains(b.table.Notes[0], "-csi-pods=0") {
		t.Errorf("skipped CSI burst: rows %+v, notes %q", b.table.Rows, b.table.Notes)
	}
}

// TestReportFleetOnly checks that a -fleet-only table holds the scale rows
// alone, and says why the others are missing.
func TestReportFleetOnly(t *testing.T) {
	b := &benchmark{opts: options{fleetOnly: true, nodes: 3, fleetPods: 0, hold: time.Minute}}
	b.report()
	if len(b.table.Rows) == 0 {
		t.Fatal("no rows")
	}
	for _, r := range b.table.Rows {
		if !strings.HasPrefix(r.Metric, "3 agents in one process") {
			t.Errorf("row %q in a -fleet-only table", r.Metric)
		}
	}
	if !strings.Contains(strings.Join(b.table.Notes, "\n"), "-fleet-only") {
		t.Errorf("notes %q do not say -fleet-only", b.table.Notes)
	}
}

// TestReportScaleMemoryLimit: the scale notes name the Go memory limit the
// fleet ran with by where it came from: -fleet-memory-max's budget, a lower
// GOMEMLIMIT the fleet kept, or none.
func TestReportScaleMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name       string
		memMax     float64
		limit      int64
		fromBudget bool
		want       string
	}{
		{"budget", 1024, 954 << 20, true, "a memory budget of 1.00 GiB"},
		{"lower GOMEMLIMIT kept", 1024, 500 << 20, false, "(GOMEMLIMIT, kept: lower than what -fleet-memory-max=1024 gives)"},
		{"GOMEMLIMIT alone", 0, 500 << 20, false, "Go memory limit of 500.0 MiB (GOMEMLIMIT)"},
		{"none", 0, math.MaxInt64, false, "without a Go memory limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &benchmark{opts: options{nodes: 3, hold: time.Minute, fleetMemMax: tc.memMax},
				fleet: &fleetFigures{nodes: 3, memLimit: tc.limit, fromBudget: tc.fromBudget}}
			b.reportScale()
			notes := strings.Join(b.table.Notes, "\n")
			if !strings.Contains(notes, tc.want) {
				t.Errorf("notes do not say %q:\n%s", tc.want, notes)
			}
		})
	}
}
