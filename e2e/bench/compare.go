package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the table as indented JSON to path.
func (t *Table) WriteJSON(path string) error {
	data, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// ReadTable reads a table WriteJSON wrote.
func ReadTable(path string) (*Table, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read table: %w", err)
	}
	var t Table
	if err := json.Unmarshal(data, &t); err != nil {
		return nil, fmt.Errorf("read table %s: %w", path, err)
	}
	return &t, nil
}

// Compare writes, for every row of cur whose metric old has too, nodekit's
// old and new figure and the change of each number in it (new/old, with
// durations and sizes brought to one unit), and lists the rows only one of
// them has.
func Compare(w io.Writer, old, cur *Table) error {
	fmt.Fprintf(w, "change from %s (%s, %s) to %s (%s, %s)\n", orDash(old.Date), orDash(old.Commit), orDash(old.Machine), orDash(cur.Date), orDash(cur.Commit), orDash(cur.Machine))
	if old.FileSystem != cur.FileSystem {
		// What a new file costs differs between them: so do the figures.
		fmt.Fprintf(w, "on another file system: before %s; now %s\n", orDash(old.FileSystem), orDash(cur.FileSystem))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "METRIC\tBEFORE\tNOW\tCHANGE (now/before)\tRESULT")
	before := map[string]Row{}
	for _, r := range old.Rows {
		before[r.Metric] = r
	}
	seen := map[string]bool{}
	var added []string
	for _, r := range cur.Rows {
		o, ok := before[r.Metric]
		if !ok {
			added = append(added, r.Metric)
			continue
		}
		seen[r.Metric] = true
		result := cell(r.Result)
		if o.Result != r.Result && o.Result != "" && r.Result != "" {
			result = o.Result + " → " + r.Result
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Metric, cell(o.Value), cell(r.Value), Change(o.Value, r.Value), result)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, m := range added {
		fmt.Fprintf(w, "- new figure: %s\n", m)
	}
	for _, r := range old.Rows {
		if !seen[r.Metric] {
			fmt.Fprintf(w, "- figure gone: %s\n", r.Metric)
		}
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// quantity is a number with its unit in a figure: "2.65 s", "443", "64.9 MiB".
var quantity = regexp.MustCompile(`(-?[0-9]+(?:\.[0-9]+)?)\s*(µs|ms|s|KiB|MiB|GiB|CPU-s|%)?`)

// unitScale brings durations to seconds and sizes to MiB.
var unitScale = map[string]float64{"µs": 1e-6, "ms": 1e-3, "s": 1, "KiB": 1.0 / 1024, "MiB": 1, "GiB": 1024}

// numbers returns the quantities of a figure, each in its base unit.
func numbers(s string) []float64 {
	var out []float64
	for _, m := range quantity.FindAllStringSubmatch(s, -1) {
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			continue
		}
		if scale, ok := unitScale[m[2]]; ok {
			v *= scale
		}
		out = append(out, v)
	}
	return out
}

// Change returns the ratio new/old of each number of two figures
// ("×0.45 / ×0.60"), "—" when they cannot be compared (a figure not
// measured, or numbers that do not pair up).
func Change(old, cur string) string {
	a, b := numbers(old), numbers(cur)
	if len(a) == 0 || len(a) != len(b) {
		return "—"
	}
	parts := make([]string, len(a))
	for i := range a {
		switch {
		case a[i] == b[i]:
			parts[i] = "="
		case a[i] == 0:
			parts[i] = "new " + strconv.FormatFloat(b[i], 'g', 3, 64)
		default:
			parts[i] = "×" + strconv.FormatFloat(b[i]/a[i], 'f', 2, 64)
		}
	}
	return strings.Join(parts, " / ")
}
