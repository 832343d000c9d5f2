package stats

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// collectTimeout bounds how long a metrics collection waits for a summary.
const collectTimeout = time.Minute

// CPUAndMemorySource is what ResourceMetricsCollector reads: *Provider
// implements it.
type CPUAndMemorySource interface {
	CPUAndMemory(ctx context.Context) (*statsapi.Summary, error)
}

// The kubelet's /metrics/resource descriptors (component-base annotates
// the help text with the stability level).
var (
	nodeCPUUsageDesc = prometheus.NewDesc("node_cpu_usage_seconds_total",
		"[STABLE] Cumulative cpu time consumed by the node in core-seconds", nil, nil)
	nodeMemoryUsageDesc = prometheus.NewDesc("node_memory_working_set_bytes",
		"[STABLE] Current working set of the node in bytes", nil, nil)
	nodeSwapUsageDesc = prometheus.NewDesc("node_swap_usage_bytes",
		"[ALPHA] Current swap usage of the node in bytes. Reported only on non-windows systems", nil, nil)
	containerCPUUsageDesc = prometheus.NewDesc("container_cpu_usage_seconds_total",
		"[STABLE] Cumulative cpu time consumed by the container in core-seconds", []string{"container", "pod", "namespace"}, nil)
	containerMemoryUsageDesc = prometheus.NewDesc("container_memory_working_set_bytes",
		"[STABLE] Current working set of the container in bytes", []string{"container", "pod", "namespace"}, nil)
	containerSwapUsageDesc = prometheus.NewDesc("container_swap_usage_bytes",
		"[ALPHA] Current amount of the container swap usage in bytes. Reported only on non-windows systems", []string{"container", "pod", "namespace"}, nil)
	containerSwapLimitDesc = prometheus.NewDesc("container_swap_limit_bytes",
		"[ALPHA] Current amount of the container swap limit in bytes. Reported only on non-windows systems", []string{"container", "pod", "namespace"}, nil)
	podCPUUsageDesc = prometheus.NewDesc("pod_cpu_usage_seconds_total",
		"[STABLE] Cumulative cpu time consumed by the pod in core-seconds", []string{"pod", "namespace"}, nil)
	podMemoryUsageDesc = prometheus.NewDesc("pod_memory_working_set_bytes",
		"[STABLE] Current working set of the pod in bytes", []string{"pod", "namespace"}, nil)
	podSwapUsageDesc = prometheus.NewDesc("pod_swap_usage_bytes",
		"[ALPHA] Current amount of the pod swap usage in bytes. Reported only on non-windows systems", []string{"pod", "namespace"}, nil)
	resourceScrapeErrorDesc = prometheus.NewDesc("resource_scrape_error",
		"[STABLE] 1 if there was an error while getting container metrics, 0 otherwise", nil, nil)
	containerStartTimeDesc = prometheus.NewDesc("container_start_time_seconds",
		"[STABLE] Start time of the container since unix epoch in seconds", []string{"container", "pod", "namespace"}, nil)
)

// ResourceMetricsCollector returns the collector of the kubelet's
// /metrics/resource endpoint (pkg/kubelet/metrics/collectors): the node's,
// pods' and containers' CPU time, working set and swap, the containers'
// start times, and resource_scrape_error, from src.CPUAndMemory on every
// collection (bounded by a one-minute timeout), with the samples' times as
// timestamps. scrape_error, deprecated in 1.29 and hidden by the kubelet
// since 1.30, is not exported. Register it in the registry that serves
// /metrics/resource; it is safe for concurrent use. logger (the node's)
// takes a failed collection's error and is in the context src is called
// with.
func ResourceMetricsCollector(src CPUAndMemorySource, logger logr.Logger) prometheus.Collector {
	return &resourceCollector{src: src, logger: logger}
}

type resourceCollector struct {
	src    CPUAndMemorySource
	logger logr.Logger
}

func (c *resourceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		nodeCPUUsageDesc, nodeMemoryUsageDesc, nodeSwapUsageDesc, containerStartTimeDesc,
		containerCPUUsageDesc, containerMemoryUsageDesc, containerSwapUsageDesc, containerSwapLimitDesc,
		podCPUUsageDesc, podMemoryUsageDesc, podSwapUsageDesc, resourceScrapeErrorDesc,
	} {
		ch <- d
	}
}

func (c *resourceCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), c.logger), collectTimeout)
	defer cancel()
	s, err := c.src.CPUAndMemory(ctx)
	if err != nil {
		c.logger.Error(err, "Error getting summary for resourceMetric prometheus endpoint")
		ch <- prometheus.MustNewConstMetric(resourceScrapeErrorDesc, prometheus.GaugeValue, 1)
		return
	}
	n := s.Node
	if n.CPU != nil && n.CPU.UsageCoreNanoSeconds != nil {
		ch <- timed(n.CPU.Time.Time, nodeCPUUsageDesc, prometheus.CounterValue, seconds(*n.CPU.UsageCoreNanoSeconds))
	}
	if n.Memory != nil && n.Memory.WorkingSetBytes != nil {
		ch <- timed(n.Memory.Time.Time, nodeMemoryUsageDesc, prometheus.GaugeValue, float64(*n.Memory.WorkingSetBytes))
	}
	if n.Swap != nil && n.Swap.SwapUsageBytes != nil {
		ch <- timed(n.Swap.Time.Time, nodeSwapUsageDesc, prometheus.GaugeValue, float64(*n.Swap.SwapUsageBytes))
	}
	for i := range s.Pods {
		pod := &s.Pods[i]
		ref := pod.PodRef
		for j := range pod.Containers {
			ctr := &pod.Containers[j]
			if ctr.StartTime.Unix() > 0 {
				ch <- prometheus.MustNewConstMetric(containerStartTimeDesc, prometheus.GaugeValue,
					float64(ctr.StartTime.UnixNano())/float64(time.Second), ctr.Name, ref.Name, ref.Namespace)
			}
			if ctr.CPU != nil && ctr.CPU.UsageCoreNanoSeconds != nil {
				ch <- timed(ctr.CPU.Time.Time, containerCPUUsageDesc, prometheus.CounterValue, seconds(*ctr.CPU.UsageCoreNanoSeconds), ctr.Name, ref.Name, ref.Namespace)
			}
			if ctr.Memory != nil && ctr.Memory.WorkingSetBytes != nil {
				ch <- timed(ctr.Memory.Time.Time, containerMemoryUsageDesc, prometheus.GaugeValue, float64(*ctr.Memory.WorkingSetBytes), ctr.Name, ref.Name, ref.Namespace)
			}
			if sw := ctr.Swap; sw != nil {
				usage := float64(0)
				if sw.SwapUsageBytes != nil {
					usage = float64(*sw.SwapUsageBytes)
					ch <- timed(sw.Time.Time, containerSwapUsageDesc, prometheus.GaugeValue, usage, ctr.Name, ref.Name, ref.Namespace)
				}
				if sw.SwapAvailableBytes != nil {
					ch <- timed(sw.Time.Time, containerSwapLimitDesc, prometheus.GaugeValue, float64(*sw.SwapAvailableBytes)+usage, ctr.Name, ref.Name, ref.Namespace)
				}
			}
		}
		if pod.CPU != nil && pod.CPU.UsageCoreNanoSeconds != nil {
			ch <- timed(pod.CPU.Time.Time, podCPUUsageDesc, prometheus.CounterValue, seconds(*pod.CPU.UsageCoreNanoSeconds), ref.Name, ref.Namespace)
		}
		if pod.Memory != nil && pod.Memory.WorkingSetBytes != nil {
			ch <- timed(pod.Memory.Time.Time, podMemoryUsageDesc, prometheus.GaugeValue, float64(*pod.Memory.WorkingSetBytes), ref.Name, ref.Namespace)
		}
		if pod.Swap != nil && pod.Swap.SwapUsageBytes != nil {
			ch <- timed(pod.Swap.Time.Time, podSwapUsageDesc, prometheus.GaugeValue, float64(*pod.Swap.SwapUsageBytes), ref.Name, ref.Namespace)
		}
	}
	ch <- prometheus.MustNewConstMetric(resourceScrapeErrorDesc, prometheus.GaugeValue, 0)
}

// timed returns a constant metric stamped with t.
func timed(t time.Time, d *prometheus.Desc, vt prometheus.ValueType, v float64, labels ...string) prometheus.Metric {
	return prometheus.NewMetricWithTimestamp(t, prometheus.MustNewConstMetric(d, vt, v, labels...))
}

// seconds converts nanoseconds to seconds.
func seconds(ns uint64) float64 { return float64(ns) / float64(time.Second) }
