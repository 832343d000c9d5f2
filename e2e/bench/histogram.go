package bench

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// Histogram is the change of one Prometheus histogram between two scrapes:
// cumulative counts per upper bound (seconds), the sample count and sum.
type Histogram struct {
	Bounds []float64
	Counts []uint64 // cumulative, per bound
	Count  uint64
	Sum    float64
}

// HistogramDelta returns after's histogram name less before's (before may
// be nil), its series whose labels include all of match added together.
// ok is false when after has no such histogram.
func HistogramDelta(before, after cluster.Metrics, name string, match map[string]string) (h Histogram, ok bool) {
	a, ok := collect(after, name, match)
	if !ok {
		return Histogram{}, false
	}
	if b, found := collect(before, name, match); found && len(b.Bounds) == len(a.Bounds) {
		for i := range a.Counts {
			a.Counts[i] -= b.Counts[i]
		}
		a.Count -= b.Count
		a.Sum -= b.Sum
	}
	return a, true
}

func collect(m cluster.Metrics, name string, match map[string]string) (Histogram, bool) {
	f, ok := m[name]
	if !ok || f.GetType() != dto.MetricType_HISTOGRAM {
		return Histogram{}, false
	}
	var h Histogram
	found := false
	for _, metric := range f.Metric {
		if !labelsMatch(metric, match) {
			continue
		}
		hist := metric.GetHistogram()
		if !found {
			for _, b := range hist.GetBucket() {
				h.Bounds = append(h.Bounds, b.GetUpperBound())
			}
			h.Counts = make([]uint64, len(h.Bounds))
			found = true
		}
		for i, b := range hist.GetBucket() {
			if i < len(h.Counts) {
				h.Counts[i] += b.GetCumulativeCount()
			}
		}
		h.Count += hist.GetSampleCount()
		h.Sum += hist.GetSampleSum()
	}
	return h, found
}

func labelsMatch(metric *dto.Metric, match map[string]string) bool {
	for k, v := range match {
		found := false
		for _, l := range metric.GetLabel() {
			if l.GetName() == k && l.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Quantile estimates the q-quantile (0 < q ≤ 1) by linear interpolation
// within the bucket that holds it, as Prometheus's histogram_quantile does;
// 0 without samples. Samples above the last finite bound are reported as
// that bound.
func (h Histogram) Quantile(q float64) time.Duration {
	if h.Count == 0 || len(h.Bounds) == 0 {
		return 0
	}
	rank := q * float64(h.Count)
	i := sort.Search(len(h.Counts), func(i int) bool { return float64(h.Counts[i]) >= rank })
	if i == len(h.Counts) {
		return seconds(h.Bounds[len(h.Bounds)-1])
	}
	lower, below := 0.0, uint64(0)
	if i > 0 {
		lower, below = h.Bounds[i-1], h.Counts[i-1]
	}
	upper := h.Bounds[i]
	if math.IsInf(upper, 1) {
		return seconds(lower)
	}
	in := h.Counts[i] - below
	if in == 0 {
		return seconds(upper)
	}
	return seconds(lower + (upper-lower)*(rank-float64(below))/float64(in))
}

// Buckets lists the samples per bucket, "≤ 100 ms: 3, ≤ 1.00 s: 27, >
// 60.00 s: 1", leaving out the empty ones: where a quantile interpolated
// within a wide bucket (1–5 s: any sample there reads as up to 5 s) would
// mislead, the counts say what is known. "none" without samples.
func (h Histogram) Buckets() string {
	var parts []string
	below := uint64(0)
	for i, c := range h.Counts {
		if n := c - below; n > 0 {
			var bound string
			switch {
			case !math.IsInf(h.Bounds[i], 1):
				bound = "≤ " + FormatDuration(seconds(h.Bounds[i]))
			case i > 0:
				bound = "> " + FormatDuration(seconds(h.Bounds[i-1]))
			default:
				bound = "any"
			}
			parts = append(parts, fmt.Sprintf("%s: %d", bound, n))
		}
		below = c
	}
	// Samples above the last finite bound when the scrape lists no +Inf
	// bucket.
	if h.Count > below && len(h.Bounds) > 0 && !math.IsInf(h.Bounds[len(h.Bounds)-1], 1) {
		parts = append(parts, fmt.Sprintf("> %s: %d", FormatDuration(seconds(h.Bounds[len(h.Bounds)-1])), h.Count-below))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Mean is the average sample; 0 without samples.
func (h Histogram) Mean() time.Duration {
	if h.Count == 0 {
		return 0
	}
	return seconds(h.Sum / float64(h.Count))
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// CounterDeltas returns, by the value of label, after's counter (or gauge)
// name less before's, left out where the change is zero.
func CounterDeltas(before, after cluster.Metrics, name, label string) map[string]float64 {
	values := func(m cluster.Metrics) map[string]float64 {
		out := map[string]float64{}
		f, ok := m[name]
		if !ok {
			return out
		}
		for _, metric := range f.Metric {
			key := ""
			for _, l := range metric.GetLabel() {
				if l.GetName() == label {
					key = l.GetValue()
				}
			}
			switch {
			case metric.Counter != nil:
				out[key] += metric.Counter.GetValue()
			case metric.Gauge != nil:
				out[key] += metric.Gauge.GetValue()
			}
		}
		return out
	}
	b, out := values(before), values(after)
	for k, v := range out {
		if d := v - b[k]; d != 0 {
			out[k] = d
		} else {
			delete(out, k)
		}
	}
	return out
}
