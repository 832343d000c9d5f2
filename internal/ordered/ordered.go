// Package ordered resolves the many-of-a-kind lists that an embedder
// extends through fx value groups (node status setters, pod admit
// handlers): entries carry a Name and an Order, an embedder's entry replaces
// the default of the same Name and an entry without a value removes it.
package ordered

import (
	"cmp"
	"fmt"
	"slices"
)

// Entry is one item of a list.
type Entry[T any] struct {
	// Name identifies the entry in logs and for replacement.
	Name string
	// Order places it: ascending, equal orders by Name.
	Order int
	// Value is the entry's value; Empty(Value) asks to remove the default
	// of the same Name.
	Value T
	// Default marks an entry the package itself provides; only those are
	// replaced or removed by Name.
	Default bool
}

// Resolve applies replacement and removal by name and returns the entries
// in the order they run; it does not modify in. kind names the list in
// errors ("node status setter"). empty reports whether a value asks for
// removal; removing a default that is not in the list is a no-op when
// known(name) says such a default exists in some configuration, an error
// otherwise (a misspelt name).
func Resolve[T any](kind string, in []Entry[T], empty func(T) bool, known func(name string) bool) ([]Entry[T], error) {
	defaults := map[string]bool{}
	custom := map[string]bool{}
	for i, e := range in {
		if e.Name == "" {
			return nil, fmt.Errorf("%s at index %d (order %d) has no name", kind, i, e.Order)
		}
		seen := custom
		if e.Default {
			seen = defaults
		}
		if seen[e.Name] {
			return nil, fmt.Errorf("two %ss are named %q", kind, e.Name)
		}
		seen[e.Name] = true
	}
	out := make([]Entry[T], 0, len(in))
	for _, e := range in {
		switch {
		case e.Default && custom[e.Name]:
			continue // replaced or removed
		case !e.Default && empty(e.Value):
			if !defaults[e.Name] && !known(e.Name) {
				return nil, fmt.Errorf("%s %q is empty and there is no default %s of that name to remove", kind, e.Name, kind)
			}
			continue
		}
		out = append(out, e)
	}
	slices.SortStableFunc(out, func(a, b Entry[T]) int {
		return cmp.Or(cmp.Compare(a.Order, b.Order), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}
