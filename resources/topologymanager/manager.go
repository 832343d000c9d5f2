package topologymanager

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/resources/topology"
)

// Admission reasons, the kubelet's.
const (
	ReasonTopologyAffinity = "TopologyAffinityError"
	ReasonUnexpected       = "UnexpectedAdmissionError"
)

// TopologyAffinityError rejects a pod whose resources cannot be aligned as
// the policy requires (restricted, single-numa-node).
type TopologyAffinityError struct{}

// Error is the kubelet's message.
func (TopologyAffinityError) Error() string {
	return "Resources cannot be allocated with Topology locality"
}

// Reason is ReasonTopologyAffinity.
func (TopologyAffinityError) Reason() string { return ReasonTopologyAffinity }

// AdmissionError is an allocation error of a hint provider that does not
// carry a reason of its own; it rejects the pod with
// UnexpectedAdmissionError, as the kubelet.
type AdmissionError struct{ Err error }

// Error is the kubelet's message.
func (e *AdmissionError) Error() string {
	return fmt.Sprintf("Allocate failed due to %v, which is unexpected", e.Err)
}

// Unwrap returns the provider's error.
func (e *AdmissionError) Unwrap() error { return e.Err }

// Reason is ReasonUnexpected.
func (e *AdmissionError) Reason() string { return ReasonUnexpected }

// HintProvider is a resource manager the topology manager aligns (the CPU
// manager, the memory manager). Its methods are called from Admit, one pod
// at a time.
type HintProvider interface {
	// GetTopologyHints returns, by resource, the NUMA affinities the
	// container's request can be given with; nil for a resource means no
	// preference, an empty list that it cannot be placed.
	GetTopologyHints(pod *v1.Pod, c *v1.Container) map[string][]TopologyHint
	// GetPodTopologyHints is GetTopologyHints for the whole pod (the pod
	// scope).
	GetPodTopologyHints(pod *v1.Pod) map[string][]TopologyHint
	// Allocate gives the container its resources, aligned with the
	// affinity the Manager's GetAffinity returns for it. An error with a
	// Reason() string method rejects the pod with that reason.
	Allocate(pod *v1.Pod, c *v1.Container) error
}

// Options configures a Manager.
type Options struct {
	// Policy is the kubelet's topologyManagerPolicy (default none).
	Policy string
	// Scope is topologyManagerScope (default container).
	Scope string
	// PolicyOptions are topologyManagerPolicyOptions.
	PolicyOptions map[string]string
	// Machine is the machine's topology (its NUMA nodes). Required.
	Machine *topology.Machine
	// ActivePods, when set, lets Admit forget the affinities of pods that
	// are no longer active.
	ActivePods func() []*v1.Pod
	// Registerer registers the kubelet's topology manager metrics; nil
	// registers nothing.
	Registerer prometheus.Registerer
	// Logger logs the hints and decisions (default: discard).
	Logger logr.Logger
}

// Manager is the kubelet's topology manager: at admission it gathers each
// container's (or, with the pod scope, the pod's) NUMA hints from the
// providers, merges them under the policy, rejects the pod with
// TopologyAffinityError when the policy cannot be met, remembers the
// chosen affinity (GetAffinity) and has the providers allocate. With the
// none policy it only has the providers allocate. Its methods are safe for
// concurrent use; Admit runs one pod at a time.
type Manager struct {
	opts     Options
	numa     *numaInfo
	popts    policyOptions
	logger   logr.Logger
	metrics  *metrics
	admitMu  sync.Mutex
	mu       sync.Mutex
	hints    map[string]map[string]TopologyHint
	provider []HintProvider
}

// New checks the policy, scope and options with the kubelet's messages and
// returns a Manager without providers.
func New(opts Options) (*Manager, error) {
	if opts.Policy == "" {
		opts.Policy = PolicyNone
	}
	if opts.Scope == "" {
		opts.Scope = ScopeContainer
	}
	if opts.Machine == nil {
		return nil, errors.New("topology manager: no machine topology")
	}
	switch opts.Policy {
	case PolicyNone, PolicyBestEffort, PolicyRestricted, PolicySingleNumaNode:
	default:
		return nil, fmt.Errorf("unknown policy: %q", opts.Policy)
	}
	switch opts.Scope {
	case ScopeContainer, ScopePod:
	default:
		return nil, fmt.Errorf("unknown scope: %q", opts.Scope)
	}
	m := &Manager{opts: opts, logger: opts.Logger, hints: map[string]map[string]TopologyHint{}}
	if m.logger.GetSink() == nil {
		m.logger = logr.Discard()
	}
	m.numa = &numaInfo{nodes: opts.Machine.NUMANodeIDs(), distances: map[int][]uint64{}}
	for _, n := range opts.Machine.NUMANodes {
		m.numa.distances[n.ID] = n.Distances
	}
	if opts.Policy != PolicyNone {
		popts, err := parsePolicyOptions(opts.PolicyOptions)
		if err != nil {
			return nil, err
		}
		m.popts = popts
		if len(m.numa.nodes) > popts.maxNUMANodes {
			return nil, fmt.Errorf("unsupported on machines with more than %v NUMA Nodes", popts.maxNUMANodes)
		}
	}
	m.metrics = newMetrics(opts.Registerer)
	return m, nil
}

// AddHintProvider adds a provider; Admit consults the providers in the
// order they were added (the kubelet's: devices, CPUs, memory).
func (m *Manager) AddHintProvider(p HintProvider) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.provider = append(m.provider, p)
}

// Policy returns the policy's name.
func (m *Manager) Policy() string { return m.opts.Policy }

// Scope returns the scope's name.
func (m *Manager) Scope() string { return m.opts.Scope }

// GetAffinity returns the affinity chosen for the container at admission
// (the zero hint when none was).
func (m *Manager) GetAffinity(podUID, containerName string) TopologyHint {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hints[podUID][containerName]
}

// RemovePod forgets the pod's affinities.
func (m *Manager) RemovePod(podUID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.hints, podUID)
}

func (m *Manager) setAffinity(podUID, containerName string, h TopologyHint) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.hints[podUID] == nil {
		m.hints[podUID] = map[string]TopologyHint{}
	}
	m.hints[podUID][containerName] = h
}

func (m *Manager) providers() []HintProvider {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]HintProvider(nil), m.provider...)
}

// forgetInactive drops the affinities of pods no longer active.
func (m *Manager) forgetInactive(admitting string) {
	if m.opts.ActivePods == nil {
		return
	}
	active := map[string]bool{admitting: true}
	for _, p := range m.opts.ActivePods() {
		active[string(p.UID)] = true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for uid := range m.hints {
		if !active[uid] {
			delete(m.hints, uid)
		}
	}
}

// Admit aligns and allocates the pod's resources. It returns nil when the
// pod is admitted; otherwise an error whose Reason() is the kubelet's
// admission reason: TopologyAffinityError, a provider's own reason (such
// as the CPU manager's SMTAlignmentError), or UnexpectedAdmissionError
// (AdmissionError).
func (m *Manager) Admit(pod *v1.Pod) error {
	m.admitMu.Lock()
	defer m.admitMu.Unlock()
	start := time.Now()
	m.metrics.requests.Inc()
	defer func() { m.metrics.duration.Observe(float64(time.Since(start).Milliseconds())) }()
	m.forgetInactive(string(pod.UID))
	logger := m.logger.WithValues("pod", klog.KObj(pod), "podUID", pod.UID)
	containers := append(append([]v1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...)
	providers := m.providers()
	err := m.admit(logger, pod, containers, providers)
	if err != nil {
		m.metrics.errors.Inc()
		var r interface{ Reason() string }
		if !errors.As(err, &r) {
			err = &AdmissionError{Err: err}
		}
	}
	return err
}

func (m *Manager) admit(logger logr.Logger, pod *v1.Pod, containers []v1.Container, providers []HintProvider) error {
	allocate := func(c *v1.Container) error {
		for _, p := range providers {
			if err := p.Allocate(pod, c); err != nil {
				return err
			}
		}
		return nil
	}
	aligned := m.opts.Policy == PolicySingleNumaNode
	switch {
	case m.opts.Policy == PolicyNone:
		for i := range containers {
			if err := allocate(&containers[i]); err != nil {
				return err
			}
		}
		return nil
	case m.opts.Scope == ScopePod:
		var hints []map[string][]TopologyHint
		for _, p := range providers {
			hints = append(hints, p.GetPodTopologyHints(pod))
		}
		best, ok := merge(m.opts.Policy, m.numa, m.popts, hints)
		logger.V(2).Info("Best TopologyHint", "bestHint", best, "admit", ok)
		if !ok {
			if aligned {
				m.metrics.alignedFailures.WithLabelValues(ScopePod, "numa_node").Inc()
			}
			return TopologyAffinityError{}
		}
		for i := range containers {
			m.setAffinity(string(pod.UID), containers[i].Name, best)
			if err := allocate(&containers[i]); err != nil {
				return err
			}
		}
		if aligned {
			m.metrics.aligned.WithLabelValues(ScopePod, "numa_node").Inc()
		}
		return nil
	}
	for i := range containers {
		c := &containers[i]
		var hints []map[string][]TopologyHint
		for _, p := range providers {
			hints = append(hints, p.GetTopologyHints(pod, c))
		}
		best, ok := merge(m.opts.Policy, m.numa, m.popts, hints)
		logger.V(2).Info("Best TopologyHint", "containerName", c.Name, "bestHint", best, "admit", ok)
		if !ok {
			if aligned {
				m.metrics.alignedFailures.WithLabelValues(ScopeContainer, "numa_node").Inc()
			}
			return TopologyAffinityError{}
		}
		m.setAffinity(string(pod.UID), c.Name, best)
		if err := allocate(c); err != nil {
			return err
		}
		if aligned {
			m.metrics.aligned.WithLabelValues(ScopeContainer, "numa_node").Inc()
		}
	}
	return nil
}

// metrics are the kubelet's topology manager metrics.
type metrics struct {
	requests        prometheus.Counter
	errors          prometheus.Counter
	duration        prometheus.Histogram
	aligned         *prometheus.CounterVec
	alignedFailures *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounter(prometheus.CounterOpts{Subsystem: "kubelet", Name: "topology_manager_admission_requests_total",
			Help: "[ALPHA] The number of admission requests where resources have to be aligned."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Subsystem: "kubelet", Name: "topology_manager_admission_errors_total",
			Help: "[ALPHA] The number of admission request failures where resources could not be aligned."}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Subsystem: "kubelet", Name: "topology_manager_admission_duration_ms",
			Help: "[ALPHA] Duration in milliseconds to serve a pod admission request.", Buckets: prometheus.ExponentialBuckets(.05, 2, 15)}),
		aligned: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "kubelet", Name: "container_aligned_compute_resources_count",
			Help: "[ALPHA] Cumulative number of aligned compute resources allocated to containers by alignment type."}, []string{"scope", "boundary"}),
		alignedFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Subsystem: "kubelet", Name: "container_aligned_compute_resources_failure_count",
			Help: "[ALPHA] Cumulative number of failures to allocate aligned compute resources to containers by alignment type."}, []string{"scope", "boundary"}),
	}
	for _, scope := range []string{ScopeContainer, ScopePod} {
		m.aligned.WithLabelValues(scope, "numa_node")
		m.alignedFailures.WithLabelValues(scope, "numa_node")
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.errors, m.duration, m.aligned, m.alignedFailures)
	}
	return m
}
