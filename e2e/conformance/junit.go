package conformance

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"
)

// State is the outcome of one test in one run.
type State string

// The states a test ends in.
const (
	Passed  State = "passed"
	Failed  State = "failed"
	Skipped State = "skipped"
)

// Case is one test of a run, as the e2e framework's JUnit report gives it.
type Case struct {
	// Name is the spec's full text, e.g. "[sig-node] Pods should get a
	// host IP [NodeConformance] [Conformance]".
	Name  string
	State State
	// Reason is the failure message (State Failed, also for errors,
	// panics and interrupts) or the skip reason (State Skipped).
	Reason   string
	Duration time.Duration
}

// FirstLine is the first non-blank line of the case's reason, without
// ginkgo's state marker ("[FAILED] ", "[TIMEDOUT] ", ...).
func (c Case) FirstLine() string {
	for _, l := range strings.Split(c.Reason, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			for _, marker := range []string{"[FAILED]", "[TIMEDOUT]", "[PANICKED]", "[INTERRUPTED]", "[ABORTED]"} {
				l = strings.TrimSpace(strings.TrimPrefix(l, marker))
			}
			return l
		}
	}
	return ""
}

type junitSuites struct {
	Suites []struct {
		Cases []struct {
			Name    string  `xml:"name,attr"`
			Time    float64 `xml:"time,attr"`
			Status  string  `xml:"status,attr"`
			Skipped *struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
			Failure *struct {
				Message string `xml:"message,attr"`
				Body    string `xml:",chardata"`
			} `xml:"failure"`
			Error *struct {
				Message string `xml:"message,attr"`
				Body    string `xml:",chardata"`
			} `xml:"error"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// parseJUnit reads the JUnit XML report e2e.test writes to
// <report-dir>/junit_01.xml and returns its tests in order. It leaves out
// what did not run because the focus or skip expression filtered it out
// (skipped without a reason) and the suite's setup and report nodes
// ([SynchronizedBeforeSuite] and the like), except a setup node that
// failed, which is returned as a failed case: then no test ran.
func parseJUnit(r io.Reader) ([]Case, error) {
	var doc junitSuites
	if err := xml.NewDecoder(r).Decode(&doc); err != nil {
		return nil, fmt.Errorf("parse JUnit report: %w", err)
	}
	var cases []Case
	for _, s := range doc.Suites {
		for _, tc := range s.Cases {
			c := Case{Name: tc.Name, State: Passed, Duration: time.Duration(tc.Time * float64(time.Second))}
			switch {
			case tc.Failure != nil:
				c.State, c.Reason = Failed, firstNonEmpty(tc.Failure.Message, tc.Failure.Body)
			case tc.Error != nil:
				c.State, c.Reason = Failed, firstNonEmpty(tc.Error.Message, tc.Error.Body)
			case tc.Skipped != nil:
				if tc.Skipped.Message == "skipped" || tc.Skipped.Message == "pending" {
					continue // filtered out, not run
				}
				c.State, c.Reason = Skipped, strings.TrimPrefix(tc.Skipped.Message, "skipped - ")
			}
			setup := strings.HasPrefix(tc.Name, "[SynchronizedBeforeSuite]") || strings.HasPrefix(tc.Name, "[BeforeSuite]") ||
				strings.HasPrefix(tc.Name, "[SynchronizedAfterSuite]") || strings.HasPrefix(tc.Name, "[AfterSuite]") ||
				strings.HasPrefix(tc.Name, "[ReportBeforeSuite]") || strings.HasPrefix(tc.Name, "[ReportAfterSuite]") ||
				strings.HasPrefix(tc.Name, "[DeferCleanup (Suite)]")
			if setup && c.State != Failed {
				continue
			}
			c.Name = strings.TrimPrefix(c.Name, "[It] ")
			cases = append(cases, c)
		}
	}
	return cases, nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if strings.TrimSpace(v) != "" {
			return v
		}
	}
	return ""
}
