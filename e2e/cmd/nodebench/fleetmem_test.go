package main

import (
	"runtime"
	"strings"
	"testing"
)

func TestComponentOfInnermostMatch(t *testing.T) {
	// This test's innermost frames are nodebench's own.
	pcs := make([]uintptr, 32)
	n := runtime.Callers(1, pcs)
	if got, want := componentOf(pcs[:n]), "the benchmark's own (e2e)"; got != want {
		t.Errorf("componentOf(test stack) = %q, want %q", got, want)
	}
	// Past runtime.Callers' own frame, the testing package's: "other".
	n = runtime.Callers(4, pcs)
	if got := componentOf(pcs[:n]); got != "other" {
		t.Errorf("componentOf(testing's stack) = %q, want other", got)
	}
}

func TestPerAgentAndFormat(t *testing.T) {
	before := heapByComponent{"fx/dig graph": 1000, "other": 50}
	after := heapByComponent{"fx/dig graph": 1000 + 10*300<<10, "nodekit pods": 10 * 100 << 10, "tiny": 10, "other": 50 + 10*4<<10}
	got := formatComponents(after.perAgent(before, 10))
	for _, want := range []string{"404 KiB in all", "fx/dig graph 300.0 KiB", "nodekit pods 100.0 KiB", "other 4.0 KiB"} {
		if !strings.Contains(got, want) {
			t.Errorf("formatComponents = %q, want it to contain %q", got, want)
		}
	}
	if strings.Contains(got, "tiny") {
		t.Errorf("formatComponents = %q: a component under 1%% must fold into other", got)
	}
}

func TestScaleHeapSample(t *testing.T) {
	if got := scaleHeapSample(0, 0); got != 0 {
		t.Errorf("scaleHeapSample(0, 0) = %v", got)
	}
	// A sampled object far larger than the rate is its own size.
	if got := scaleHeapSample(1, 100<<20); got < 100<<20 || got > 100<<20+1 {
		t.Errorf("scaleHeapSample(1, 100 MiB) = %v, want 100 MiB", got)
	}
	// A small one stands for many.
	if got := scaleHeapSample(1, 64); got < float64(memProfileRate)/2 {
		t.Errorf("scaleHeapSample(1, 64) = %v, want about the sampling rate", got)
	}
}
