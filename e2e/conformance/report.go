package conformance

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Result is one run of the focus against one node agent.
type Result struct {
	Agent Agent
	// Cases are the tests that ran (or were skipped by the test itself).
	Cases []Case
	// Duration is the wall time of the ginkgo run.
	Duration time.Duration
	// Dir holds the run's JUnit report, e2e.test's output (e2e.log) and
	// the node agent's log.
	Dir string
}

// ReadResult reads the JUnit report (junit_01.xml) of an earlier run of
// agent, for a table of runs made apart. Its Duration is zero: the report
// does not hold the run's wall time.
func ReadResult(agent Agent, path string) (*Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cases, err := parseJUnit(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &Result{Agent: agent, Cases: cases, Dir: filepath.Dir(path)}, nil
}

// Merge adds the cases of later, a run of the same agent made after r (a
// focus run in chunks, or a test run again): a test in both takes later's
// result. Durations add up.
func (r *Result) Merge(later *Result) {
	at := map[string]int{}
	for i, c := range r.Cases {
		at[c.Name] = i
	}
	for _, c := range later.Cases {
		if i, ok := at[c.Name]; ok {
			r.Cases[i] = c
			continue
		}
		at[c.Name] = len(r.Cases)
		r.Cases = append(r.Cases, c)
	}
	r.Duration += later.Duration
}

// Count returns how many cases ended in state s.
func (r *Result) Count(s State) int {
	n := 0
	for _, c := range r.Cases {
		if c.State == s {
			n++
		}
	}
	return n
}

// Report is the outcome of Run: one Result per agent, in the order run.
type Report struct {
	KubernetesVersion string
	Focus, Skip       string
	Results           []*Result
}

// Result returns the result of agent a, or nil when it did not run.
func (r *Report) Result(a Agent) *Result {
	for _, res := range r.Results {
		if res.Agent == a {
			return res
		}
	}
	return nil
}

// Row is one test of a Report across its agents.
type Row struct {
	Name string
	// States and Cases are by agent; an agent whose run did not include
	// the test has neither.
	States map[Agent]State
	Cases  map[Agent]Case
}

// Rows returns every test any agent ran, sorted by name.
func (r *Report) Rows() []Row {
	byName := map[string]*Row{}
	for _, res := range r.Results {
		for _, c := range res.Cases {
			row := byName[c.Name]
			if row == nil {
				row = &Row{Name: c.Name, States: map[Agent]State{}, Cases: map[Agent]Case{}}
				byName[c.Name] = row
			}
			row.States[res.Agent] = c.State
			row.Cases[res.Agent] = c
		}
	}
	rows := make([]Row, 0, len(byName))
	for _, row := range byName {
		rows = append(rows, *row)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return rows
}

// NodekitOnlyFailures are the tests nodekit failed that the kubelet passed.
func (r *Report) NodekitOnlyFailures() []Row {
	var out []Row
	for _, row := range r.Rows() {
		if row.States[Nodekit] == Failed && row.States[Kubelet] == Passed {
			out = append(out, row)
		}
	}
	return out
}

// WriteMarkdown writes the report as a markdown summary and a table: test,
// the kubelet's result, nodekit's result and a note: the first line of the
// failure for a nodekit-only failure, "fails on both" with the kubelet's
// reason for a test that cannot pass on this machine, or the skip reason.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	if r.KubernetesVersion != "" {
		fmt.Fprintf(&b, "Kubernetes %s ", r.KubernetesVersion)
	}
	fmt.Fprintf(&b, "e2e.test, focus `%s`", r.Focus)
	if r.Skip != "" {
		fmt.Fprintf(&b, ", skip `%s`", r.Skip)
	}
	b.WriteString("\n\n")
	for _, res := range r.Results {
		fmt.Fprintf(&b, "- %s: %d passed, %d failed, %d skipped of %d", res.Agent,
			res.Count(Passed), res.Count(Failed), res.Count(Skipped), len(res.Cases))
		if res.Duration > 0 {
			fmt.Fprintf(&b, " (%s)", res.Duration.Round(time.Second))
		}
		b.WriteString("\n")
	}
	if r.Result(Kubelet) != nil && r.Result(Nodekit) != nil {
		fmt.Fprintf(&b, "- nodekit-only failures: %d\n", len(r.NodekitOnlyFailures()))
	}
	b.WriteString("\n| Test | kubelet | nodekit | Note |\n|---|---|---|---|\n")
	for _, row := range r.Rows() {
		k, n := row.States[Kubelet], row.States[Nodekit]
		note := ""
		switch {
		case n == Failed && k == Passed:
			note = "nodekit only: " + row.Cases[Nodekit].FirstLine()
		case n == Failed && k == Failed:
			note = "fails on both: " + row.Cases[Kubelet].FirstLine()
		case k == Failed && n == Passed:
			note = "kubelet only: " + row.Cases[Kubelet].FirstLine()
		case n == Skipped:
			note = "skipped: " + row.Cases[Nodekit].FirstLine()
		case k == Skipped:
			note = "skipped: " + row.Cases[Kubelet].FirstLine()
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", cell(row.Name), stateCell(k), stateCell(n), cell(note))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func stateCell(s State) string {
	if s == "" {
		return "—"
	}
	return string(s)
}

// cell makes s safe in a markdown table cell and bounds its length.
func cell(s string) string {
	s = strings.NewReplacer("|", `\|`, "\n", " ", "\r", "").Replace(s)
	const max = 240
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}
