package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Row is one line of the results table. Empty cells print as "—".
type Row struct {
	// Metric names the figure and how it was measured.
	Metric string `json:"metric"`
	// Value is nodekit's figure.
	Value string `json:"nodekit"`
	// Target is what nodekit must reach.
	Target string `json:"target,omitempty"`
	// Kubelet is the upstream kubelet's figure measured in the same run.
	Kubelet string `json:"kubelet,omitempty"`
	// Anchor is the reference figure of the project brief.
	Anchor string `json:"anchor,omitempty"`
	// Result is Pass, Fail or empty when there is nothing to judge.
	Result string `json:"result,omitempty"`
}

// Results of a Row.
const (
	Pass = "pass"
	Fail = "FAIL"
)

// Verdict returns Pass when ok, else Fail.
func Verdict(ok bool) string {
	if ok {
		return Pass
	}
	return Fail
}

// Table is the benchmark's report: rows in the order added, then notes.
// It is written as text (Write) or JSON (WriteJSON, ReadTable).
type Table struct {
	// Date and Machine say when and where it was measured (RFC 3339; CPUs,
	// kernel, Go).
	Date    string `json:"date,omitempty"`
	Machine string `json:"machine,omitempty"`
	// Commit is the source measured (git describe of the checkout, with
	// "-dirty" when it had uncommitted changes); Command the command line
	// that measured it.
	Commit  string `json:"commit,omitempty"`
	Command string `json:"command,omitempty"`
	// FileSystem says which file system held the nodes' state (what each
	// new file costs moves the figures).
	FileSystem string   `json:"file_system,omitempty"`
	Rows       []Row    `json:"rows"`
	Notes      []string `json:"notes,omitempty"`
}

// Add appends a row.
func (t *Table) Add(r Row) { t.Rows = append(t.Rows, r) }

// Note appends a note printed under the table.
func (t *Table) Note(format string, args ...any) {
	t.Notes = append(t.Notes, fmt.Sprintf(format, args...))
}

// Failed reports whether any row failed its target.
func (t *Table) Failed() bool {
	for _, r := range t.Rows {
		if r.Result == Fail {
			return true
		}
	}
	return false
}

// Write prints the table with aligned columns, then the notes.
func (t *Table) Write(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "METRIC\tNODEKIT\tTARGET\tKUBELET (this run)\tANCHOR (brief)\tRESULT")
	for _, r := range t.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", cell(r.Metric), cell(r.Value), cell(r.Target), cell(r.Kubelet), cell(r.Anchor), cell(r.Result))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range t.Notes {
		if _, err := fmt.Fprintln(w, "- "+n); err != nil {
			return err
		}
	}
	return nil
}

func cell(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return "—"
	}
	return s
}
