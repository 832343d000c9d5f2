package status

import (
	"errors"
	"fmt"
	"net"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/machine"
)

// PressureFuncs report whether the node is under memory, disk or PID
// pressure, typically the eviction manager's IsUnder*Pressure methods. A nil
// func means no pressure. They must be cheap and safe for concurrent use.
type PressureFuncs struct {
	Memory, Disk, PID func() bool
}

// SetterOptions configures the kubelet's default setters (DefaultSetters).
// The agent builds it from the KubeletConfiguration and its flags; in the fx
// Module the func fields left nil are filled from the graph.
type SetterOptions struct {
	// Hostname is reported as the node's Hostname address; in the fx Module
	// it defaults to Options.Hostname.
	Hostname string
	// NodeIPs is --node-ip: empty to detect, one address, or two of
	// different families (dual-stack); an unspecified address (0.0.0.0 or
	// ::) means detect, preferring that family. Loopback addresses are
	// accepted with a warning logged once (the kubelet refuses them), so
	// several test nodes can share one machine on 127.0.0.N.
	NodeIPs []net.IP
	// MaxPods is the pods capacity (default 110); PodsPerCore, when
	// positive, caps it at PodsPerCore × cores.
	MaxPods, PodsPerCore int32
	// KubeReserved and SystemReserved are subtracted from capacity to give
	// allocatable, and so are EvictionHard's (the kubelet's evictionHard
	// map) memory.available and nodefs.available thresholds.
	KubeReserved, SystemReserved v1.ResourceList
	EvictionHard                 map[string]string
	// NoLocalStorageCapacityIsolation is kubelet
	// localStorageCapacityIsolation=false: no ephemeral-storage capacity, and
	// Ready does not need it.
	NoLocalStorageCapacityIsolation bool
	// NodeStatusMaxImages caps status.images; nil means 50, -1 all, 0 none.
	NodeStatusMaxImages *int32
	// KubeletPort is reported in daemonEndpoints; default 10250.
	KubeletPort int32
	// KubeletVersion is reported in nodeInfo; default
	// nodekit.KubeletVersion().
	KubeletVersion string
	// DeclaredFeatures is status.declaredFeatures; nil leaves it alone.
	DeclaredFeatures []string
	// Roots locate the host's files for the default Machine.
	Roots machine.Roots
	// Machine overrides where machine facts come from (the agent's one
	// machine.Func, or a simulated node's); default machine.Cached of
	// machine.Read(Roots).
	Machine machine.Func

	// RuntimeVersion and RuntimeHealth are required.
	RuntimeVersion RuntimeVersionFunc
	RuntimeHealth  RuntimeHealthFunc
	// RuntimeHandlers, RuntimeFeatures and ListImages are optional: without
	// them the matching setter is left out.
	RuntimeHandlers RuntimeHandlersFunc
	RuntimeFeatures RuntimeFeaturesFunc
	ListImages      ListImagesFunc
	// VolumesInUse feeds status.volumesInUse; without it (nil funcs) the
	// VolumesInUse setter is left out.
	VolumesInUse VolumesInUseFuncs
	// Pressure feeds the pressure conditions; nil funcs report no pressure.
	Pressure PressureFuncs
	// HealthChecks also gate Ready (e.g. PLEG).
	HealthChecks []HealthCheck
	// SoftRequirements, when set and returning an error, appends
	// ". WARNING: <error>" to the Ready message without making the node
	// NotReady (the kubelet's container-manager soft requirements).
	SoftRequirements func() error
	// Recorder receives the node events; nil records none.
	Recorder record.EventRecorder
	// Clock stamps conditions; default clock.RealClock{}.
	Clock clock.PassiveClock
}

// DefaultSetters builds the kubelet's setters, in its order, each named
// (Setter* constants) and ordered (Order* constants) so that an embedder's
// OrderedSetter of the same Name replaces it. The returned setters carry
// state (last events, the runtime name) and belong to one Reporter.
func DefaultSetters(opts SetterOptions) ([]OrderedSetter, error) {
	if opts.Hostname == "" {
		return nil, errors.New("default node status setters: Hostname is required")
	}
	host := opts.Machine
	if host == nil {
		roots := opts.Roots
		host = machine.Cached(func() (*machine.Info, error) { return machine.Read(roots) })
	}
	maxImages := int32(defaultNodeStatusMaxImages)
	if opts.NodeStatusMaxImages != nil {
		maxImages = *opts.NodeStatusMaxImages
	}
	port := opts.KubeletPort
	if port == 0 {
		port = defaultKubeletPort
	}

	var out []OrderedSetter
	var errs []error
	add := func(name string, order int, s Setter, err error) {
		if err != nil {
			errs = append(errs, err)
			return
		}
		out = append(out, OrderedSetter{Name: name, Order: order, Set: s, isDefault: true})
	}
	s, err := nodeAddress(nodeAddressOptions{NodeIPs: opts.NodeIPs, Hostname: opts.Hostname})
	add(SetterNodeAddress, OrderNodeAddress, s, err)
	s, err = machineInfo(machineInfoOptions{
		Machine: host, MaxPods: opts.MaxPods, PodsPerCore: opts.PodsPerCore,
		KubeReserved: opts.KubeReserved, SystemReserved: opts.SystemReserved, EvictionHard: opts.EvictionHard,
		NoLocalStorageCapacityIsolation: opts.NoLocalStorageCapacityIsolation, Recorder: opts.Recorder,
	})
	add(SetterMachineInfo, OrderMachineInfo, s, err)
	s, err = versionInfo(versionInfoOptions{Machine: host, RuntimeVersion: opts.RuntimeVersion, KubeletVersion: opts.KubeletVersion})
	add(SetterVersionInfo, OrderVersionInfo, s, err)
	s, err = daemonEndpoints(port)
	add(SetterDaemonEndpoints, OrderDaemonEndpoints, s, err)
	if opts.ListImages != nil {
		s, err = imagesSetter(maxImages, opts.ListImages)
		add(SetterImages, OrderImages, s, err)
	}
	add(SetterGoRuntime, OrderGoRuntime, goRuntime(), nil)
	if opts.RuntimeHandlers != nil {
		s, err = runtimeHandlers(opts.RuntimeHandlers)
		add(SetterRuntimeHandlers, OrderRuntimeHandlers, s, err)
	}
	if opts.RuntimeFeatures != nil {
		s, err = nodeFeatures(opts.RuntimeFeatures)
		add(SetterNodeFeatures, OrderNodeFeatures, s, err)
	}
	add(SetterDeclaredFeatures, OrderDeclaredFeatures, declaredFeatures(opts.DeclaredFeatures), nil)
	pressure := func(f func() bool) pressureOptions {
		return pressureOptions{Pressure: f, Clock: opts.Clock, Recorder: opts.Recorder}
	}
	add(SetterMemoryPressure, OrderMemoryPressure, memoryPressureCondition(pressure(opts.Pressure.Memory)), nil)
	add(SetterDiskPressure, OrderDiskPressure, diskPressureCondition(pressure(opts.Pressure.Disk)), nil)
	add(SetterPIDPressure, OrderPIDPressure, pidPressureCondition(pressure(opts.Pressure.PID)), nil)
	add(SetterNodeSchedulable, OrderNodeSchedulable, nodeSchedulable(opts.Recorder), nil)
	s, err = readyCondition(readyOptions{
		RuntimeHealth: opts.RuntimeHealth, HealthChecks: opts.HealthChecks, SoftRequirements: opts.SoftRequirements,
		NoLocalStorageCapacityIsolation: opts.NoLocalStorageCapacityIsolation, Clock: opts.Clock, Recorder: opts.Recorder,
	})
	add(SetterReady, OrderReady, s, err)
	if opts.VolumesInUse.Synced != nil || opts.VolumesInUse.InUse != nil {
		s, err = volumesInUse(opts.VolumesInUse)
		add(SetterVolumesInUse, OrderVolumesInUse, s, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("default node status setters for host %s: %w", opts.Hostname, err)
	}
	return out, nil
}
