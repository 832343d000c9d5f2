package dra

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// anyDriver is the driver_name of dra_resource_claims_in_use that counts
// the claims of every driver, as the kubelet's.
const anyDriver = "<any>"

// metrics are the kubelet's DRA metrics, by its names (subsystem "dra").
type metrics struct {
	operations   *prometheus.HistogramVec
	grpc         *prometheus.HistogramVec
	prepareSkips *prometheus.CounterVec
	unprepSkips  *prometheus.CounterVec
	inUse        *prometheus.Desc
	m            *Manager
}

func newMetrics(m *Manager, reg prometheus.Registerer) *metrics {
	buckets := prometheus.ExponentialBucketsRange(.1, 40, 15)
	x := &metrics{
		m: m,
		operations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "dra",
			Name:      "operations_duration_seconds",
			Help:      "[ALPHA] Latency histogram in seconds for the duration of handling all ResourceClaims referenced by a pod when the pod starts or stops. Identified by the name of the operation (PrepareResources or UnprepareResources) and separated by the success of the operation. The number of failed operations is provided through the histogram's overall count.",
			Buckets:   buckets,
		}, []string{"operation_name", "is_error"}),
		grpc: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "dra",
			Name:      "grpc_operations_duration_seconds",
			Help:      "[ALPHA] Duration in seconds of the DRA gRPC operations",
			Buckets:   buckets,
		}, []string{"driver_name", "method_name", "grpc_status_code"}),
		prepareSkips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "dra",
			Name:      "node_prepare_skips_total",
			Help:      "[ALPHA] Cumulative number of times NodePrepareResources gRPC calls were skipped due to SkipNodeOperations.",
		}, []string{"driver_name"}),
		unprepSkips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "dra",
			Name:      "node_unprepare_skips_total",
			Help:      "[ALPHA] Cumulative number of times NodeUnprepareResources gRPC calls were skipped due to SkipNodeOperations.",
		}, []string{"driver_name"}),
		inUse: prometheus.NewDesc("dra_resource_claims_in_use",
			"[ALPHA] The number of ResourceClaims that are currently in use on the node, by driver name (driver_name label value) and across all drivers (special value <any> for driver_name). Note that the sum of all by-driver counts is not the total number of in-use ResourceClaims because the same ResourceClaim might use devices from different drivers. Instead, use the count for the <any> driver_name.",
			[]string{"driver_name"}, nil),
	}
	if reg != nil {
		reg.MustRegister(x.operations, x.grpc, x.prepareSkips, x.unprepSkips, x)
	}
	return x
}

// Describe and Collect make metrics the collector of
// dra_resource_claims_in_use, computed from the claim cache when scraped.
func (x *metrics) Describe(ch chan<- *prometheus.Desc) { ch <- x.inUse }

// Collect reports the prepared claims by driver.
func (x *metrics) Collect(ch chan<- prometheus.Metric) {
	for driver, n := range x.m.claimsInUse() {
		ch <- prometheus.MustNewConstMetric(x.inUse, prometheus.GaugeValue, float64(n), driver)
	}
}

func (x *metrics) operation(name string, start time.Time, err error) {
	isErr := "false"
	if err != nil {
		isErr = "true"
	}
	x.operations.WithLabelValues(name, isErr).Observe(time.Since(start).Seconds())
}

// interceptor times each call to a plugin of driver.
func (x *metrics) interceptor(driver string) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		start := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		x.grpc.WithLabelValues(driver, method, grpcCode(err)).Observe(time.Since(start).Seconds())
		return err
	}
}
