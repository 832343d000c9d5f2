package nodeshutdown

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodekit/nodekit/internal/atomicfile"
)

// state is what StateFile holds, the kubelet's format.
type state struct {
	StartTime time.Time `json:"startTime"`
	EndTime   time.Time `json:"endTime"`
}

// metrics are the kubelet's graceful shutdown gauges.
type metrics struct {
	start, end prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		start: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: "kubelet", Name: "graceful_shutdown_start_time_seconds",
			Help: "Last graceful shutdown start time since unix epoch in seconds",
		}),
		end: prometheus.NewGauge(prometheus.GaugeOpts{
			Subsystem: "kubelet", Name: "graceful_shutdown_end_time_seconds",
			Help: "Last graceful shutdown end time since unix epoch in seconds",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.start, m.end} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return nil, fmt.Errorf("node shutdown: register metrics: %w", err)
			}
		}
	}
	return m, nil
}

func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.Unix())
}

// recordState writes the shutdown's start and end (zero while it runs) to
// the state file and the gauges.
func (m *Manager) recordState(logger logr.Logger, start, end time.Time) {
	m.metrics.start.Set(unixSeconds(start))
	m.metrics.end.Set(unixSeconds(end))
	if m.opts.StateFile == "" {
		return
	}
	if err := writeState(m.opts.StateFile, state{StartTime: start, EndTime: end}); err != nil {
		logger.Error(err, "Failed to store graceful shutdown state")
	}
}

// restoreMetrics sets the gauges from the state file of an earlier run.
func (m *Manager) restoreMetrics(logger logr.Logger) {
	if m.opts.StateFile == "" {
		return
	}
	b, err := os.ReadFile(m.opts.StateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	var st state
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil {
		logger.Error(err, "Failed to load graceful shutdown state", "path", m.opts.StateFile)
		return
	}
	m.metrics.start.Set(unixSeconds(st.StartTime))
	m.metrics.end.Set(unixSeconds(st.EndTime))
}

// writeState replaces path's content atomically (0600: the agent's state
// is its own).
func writeState(path string, st state) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(path, b); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
