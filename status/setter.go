package status

import (
	"context"

	"github.com/nodekit/nodekit/internal/fxgroup"
	"github.com/nodekit/nodekit/internal/ordered"
	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
)

// Setter fills in part of a Node: a set of status fields, a condition, or a
// side effect such as an event. It modifies node in place and may partially
// mutate it before returning an error; the Reporter logs the error and goes on
// with the next setter, as the kubelet does.
//
// The Reporter calls its setters one at a time from a single goroutine, in
// Order, always on a private deep copy of the Node as last read from the API,
// so a setter may keep state between calls without locking. A setter must not
// block for long (it runs every status cycle and, at startup, every 100 ms).
// Changes to node.Spec are dropped: only status and metadata are patched.
// A setter with side effects (events, remembered state) must skip them when
// IsDryRun(ctx) is true.
type Setter func(ctx context.Context, node *v1.Node) error

// OrderedSetter is one entry of the Reporter's setter list and of the fx value
// group "node_status_setters". Setters run by ascending Order; equal orders
// run by Name.
//
// Name identifies the setter in logs and for replacement: an OrderedSetter
// that is not a default (any setter an embedder builds) replaces the default
// setter of the same Name, and one with a nil Set removes it (a no-op when
// this configuration has no such default, e.g. Images with
// nodeStatusMaxImages 0). See the package documentation.
type OrderedSetter struct {
	// Name identifies the setter; it must be unique among non-default setters.
	Name string
	// Order places the setter; see the Order* constants for the defaults.
	Order int
	// Set is the setter. Nil removes the default setter of the same Name.
	Set Setter

	// isDefault marks the setters built by DefaultSetters; only such setters
	// can be replaced by name.
	isDefault bool
}

// Names of the default setters (OrderedSetter.Name), to replace or remove one.
const (
	SetterNodeAddress      = "NodeAddress"
	SetterMachineInfo      = "MachineInfo"
	SetterVersionInfo      = "VersionInfo"
	SetterDaemonEndpoints  = "DaemonEndpoints"
	SetterImages           = "Images"
	SetterGoRuntime        = "GoRuntime"
	SetterRuntimeHandlers  = "RuntimeHandlers"
	SetterNodeFeatures     = "NodeFeatures"
	SetterDeclaredFeatures = "DeclaredFeatures"
	SetterMemoryPressure   = "MemoryPressure"
	SetterDiskPressure     = "DiskPressure"
	SetterPIDPressure      = "PIDPressure"
	SetterNodeSchedulable  = "NodeSchedulable"
	SetterReady            = "Ready"
	SetterVolumesInUse     = "VolumesInUse"
)

// Orders of the default setters, in the kubelet's order. They are 100 apart
// so an embedder can slot a setter between two of them. A custom condition
// usually goes before OrderReady, the last of the conditions: the Ready
// setter checks the capacity the others set, and the kubelet keeps Ready
// the last condition in the list. VolumesInUse follows Ready, as in the
// kubelet.
const (
	OrderNodeAddress      = 100
	OrderMachineInfo      = 200
	OrderVersionInfo      = 300
	OrderDaemonEndpoints  = 400
	OrderImages           = 500
	OrderGoRuntime        = 600
	OrderRuntimeHandlers  = 700
	OrderNodeFeatures     = 800
	OrderDeclaredFeatures = 900
	OrderMemoryPressure   = 1000
	OrderDiskPressure     = 1100
	OrderPIDPressure      = 1200
	OrderNodeSchedulable  = 1300
	OrderReady            = 10000
	OrderVolumesInUse     = 10100
)

// defaultSetterNames are the names DefaultSetters may give, whether or not
// this configuration has them: removing one that is absent is a no-op.
var defaultSetterNames = map[string]bool{
	SetterNodeAddress: true, SetterMachineInfo: true, SetterVersionInfo: true, SetterDaemonEndpoints: true,
	SetterImages: true, SetterGoRuntime: true, SetterRuntimeHandlers: true, SetterNodeFeatures: true,
	SetterDeclaredFeatures: true, SetterMemoryPressure: true, SetterDiskPressure: true, SetterPIDPressure: true,
	SetterNodeSchedulable: true, SetterReady: true, SetterVolumesInUse: true,
}

// resolveSetters applies replacement by name and returns the setters in the
// order they run. It does not modify in.
func resolveSetters(in []OrderedSetter) ([]OrderedSetter, error) {
	entries := make([]ordered.Entry[Setter], len(in))
	for i, s := range in {
		entries[i] = ordered.Entry[Setter]{Name: s.Name, Order: s.Order, Value: s.Set, Default: s.isDefault}
	}
	resolved, err := ordered.Resolve("node status setter", entries,
		func(s Setter) bool { return s == nil }, func(name string) bool { return defaultSetterNames[name] })
	if err != nil {
		return nil, err
	}
	out := make([]OrderedSetter, len(resolved))
	for i, e := range resolved {
		out[i] = OrderedSetter{Name: e.Name, Order: e.Order, Set: e.Value, isDefault: e.Default}
	}
	return out, nil
}

type dryRunKey struct{}

// withDryRun marks ctx as a trial evaluation whose result may be thrown away.
func withDryRun(ctx context.Context) context.Context {
	return context.WithValue(ctx, dryRunKey{}, true)
}

// IsDryRun reports whether the setters run on ctx only to find out what the
// status would be (the Reporter does this every 100 ms at startup to patch
// the node as soon as it turns Ready). A setter must then not record events
// or change state that decides whether it records one later. It is
// exported for an embedder's setter (AsSetter) that has such side effects.
func IsDryRun(ctx context.Context) bool {
	v, _ := ctx.Value(dryRunKey{}).(bool)
	return v
}

// AsSetter returns an fx option that adds a setter to the SetterGroup
// under name and order: setter is a Setter, or an fx constructor returning
// one (and optionally an error), whose parameters come from the graph. A
// name of a default setter replaces it. Use it instead of annotating a
// provider by hand, which can silently put a value of the wrong type in a
// group nobody reads.
func AsSetter(name string, order int, setter any) fx.Option {
	return fxgroup.Provide(SetterGroup, setter, func(s Setter) OrderedSetter {
		return OrderedSetter{Name: name, Order: order, Set: s}
	})
}

// AsHealthCheck returns an fx option that adds a HealthCheck, or what an fx
// constructor returns, to the HealthCheckGroup: the node is Ready only
// while every check is healthy.
func AsHealthCheck(check any) fx.Option {
	return fxgroup.Provide(HealthCheckGroup, check, func(c HealthCheck) HealthCheck { return c })
}
