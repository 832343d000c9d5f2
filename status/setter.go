package status

import (
	"cmp"
	"context"
	"fmt"
	"slices"

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
// setter of the same Name, and one with a nil Set removes it. See the package
// documentation.
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
)

// Orders of the default setters, in the kubelet's order. They are 100 apart
// so an embedder can slot a setter between two of them. A custom condition
// usually goes before OrderReady, which is the highest: the Ready setter
// checks the capacity the others set, and the kubelet keeps Ready the last
// condition in the list.
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
)

// resolveSetters applies replacement by name and returns the setters in the
// order they run. It does not modify in.
func resolveSetters(in []OrderedSetter) ([]OrderedSetter, error) {
	defaults := map[string]int{}
	custom := map[string]int{}
	for i, s := range in {
		if s.Name == "" {
			return nil, fmt.Errorf("node status setter at index %d (order %d) has no name", i, s.Order)
		}
		seen := custom
		if s.isDefault {
			seen = defaults
		}
		if _, dup := seen[s.Name]; dup {
			return nil, fmt.Errorf("two node status setters are named %q", s.Name)
		}
		seen[s.Name] = i
	}
	out := make([]OrderedSetter, 0, len(in))
	for _, s := range in {
		if s.isDefault {
			if _, replaced := custom[s.Name]; replaced {
				continue
			}
		} else if s.Set == nil {
			if _, ok := defaults[s.Name]; !ok {
				return nil, fmt.Errorf("node status setter %q has no Set func and there is no default setter of that name to remove", s.Name)
			}
			continue
		}
		out = append(out, s)
	}
	slices.SortStableFunc(out, func(a, b OrderedSetter) int {
		return cmp.Or(cmp.Compare(a.Order, b.Order), cmp.Compare(a.Name, b.Name))
	})
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
// or change state that decides whether it records one later.
func IsDryRun(ctx context.Context) bool {
	v, _ := ctx.Value(dryRunKey{}).(bool)
	return v
}
