package bench

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Distribution summarizes a sample of durations.
type Distribution struct {
	// N is the sample size; the other fields are zero when it is 0.
	N             int
	P50, P90, P99 time.Duration
	Min, Max      time.Duration
	Mean          time.Duration
}

// Summarize returns the nearest-rank percentiles of samples (the p-th
// percentile is the smallest sample at or above p % of them), their
// extremes and mean. samples is not modified.
func Summarize(samples []time.Duration) Distribution {
	if len(samples) == 0 {
		return Distribution{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	return Distribution{
		Mean: sum / time.Duration(len(s)),
		N:    len(s),
		P50:  percentile(s, 50),
		P90:  percentile(s, 90),
		P99:  percentile(s, 99),
		Min:  s[0],
		Max:  s[len(s)-1],
	}
}

// percentile of sorted s by nearest rank.
func percentile(s []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	if rank < 1 {
		rank = 1
	}
	return s[rank-1]
}

// Median returns the middle sample (the lower of the two middle ones for an
// even count), 0 for none.
func Median(samples []time.Duration) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// String formats the distribution as "p50 / p90 / p99".
func (d Distribution) String() string {
	if d.N == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%s / %s / %s", FormatDuration(d.P50), FormatDuration(d.P90), FormatDuration(d.P99))
}

// FormatDuration prints d in milliseconds below ten seconds' worth of
// precision that matters here: "42 ms", "1.27 s".
func FormatDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + FormatDuration(-d)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Round(time.Millisecond).Milliseconds())
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

// FormatMiB prints a byte count in MiB with one decimal, or in GiB with
// two from 1 GiB on.
func FormatMiB(bytes uint64) string {
	if bytes >= 1<<30 {
		return fmt.Sprintf("%.2f GiB", float64(bytes)/(1<<30))
	}
	return fmt.Sprintf("%.1f MiB", float64(bytes)/(1<<20))
}
