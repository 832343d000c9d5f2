package features

import (
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"
)

func TestNewValidatesAsTheKubelet(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  map[string]bool
		err  string
	}{
		{"unknown gate", map[string]bool{"NoSuchGate": true}, "unrecognized feature gate: NoSuchGate"},
		{"locked gate", map[string]bool{"ImageVolume": false}, "cannot set feature gate ImageVolume to false, feature is locked to true"},
		{"dependency off", map[string]bool{"ContainerRestartRules": false}, "RestartAllContainersOnContainerExits is enabled, but depends on features that are disabled: [ContainerRestartRules]"},
		{"dependency off with its dependent", map[string]bool{"ContainerRestartRules": false, "RestartAllContainersOnContainerExits": false}, ""},
		{"locked gate at its default", map[string]bool{"ImageVolume": true}, ""},
		{"beta gate off", map[string]bool{"ExtendWebSocketsToKubelet": false}, ""},
		{"alpha gate on", map[string]bool{"InPlacePodVerticalScalingExclusiveCPUs": true}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := New(klog.Background(), tc.set)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("New(%v) = %v, want error %q", tc.set, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New(%v): %v", tc.set, err)
			}
			for name, on := range tc.set {
				if got := g.Enabled(featuregate.Feature(name)); got != on {
					t.Errorf("Enabled(%s) = %t, want %t", name, got, on)
				}
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	var none *Gates
	g, err := New(klog.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, spec := range KubeletGates() {
		if got := none.Enabled(name); got != spec.Default {
			t.Errorf("nil Gates: Enabled(%s) = %t, want the default %t", name, got, spec.Default)
		}
		if got := g.Enabled(name); got != spec.Default {
			t.Errorf("New(nil): Enabled(%s) = %t, want the default %t", name, got, spec.Default)
		}
	}
	// New without gates set does not build the gate: its defaults must be
	// what the gate reports with nothing set.
	gate, err := newGate()
	if err != nil {
		t.Fatal(err)
	}
	for name, def := range defaults {
		if got := gate.Enabled(name); got != def {
			t.Errorf("the gate with nothing set: Enabled(%s) = %t, the defaults table %t", name, got, def)
		}
	}
	if !none.Enabled(ExtendWebSocketsToKubelet) || none.Enabled("InPlacePodVerticalScalingExclusiveCPUs") {
		t.Error("defaults are not the kubelet v1.37's")
	}
	if none.EnabledName("NoSuchGate") {
		t.Error("EnabledName of an unknown gate is true")
	}
}

func TestUnimplemented(t *testing.T) {
	g, err := New(klog.Background(), map[string]bool{
		"ExtendWebSocketsToKubelet":              false, // implemented
		"InPlacePodVerticalScalingExclusiveCPUs": true,  // not implemented
		"MemoryQoS":                              true,  // its default: nothing to report
		"KubeletSeparateDiskGC":                  false, // not implemented
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"InPlacePodVerticalScalingExclusiveCPUs", "KubeletSeparateDiskGC"}
	if got := g.Unimplemented(); !reflect.DeepEqual(got, want) {
		t.Errorf("Unimplemented() = %v, want %v", got, want)
	}
	var none *Gates
	if got := none.Unimplemented(); len(got) != 0 {
		t.Errorf("nil Gates: Unimplemented() = %v", got)
	}
}

// TestImplementedAreSettable: a gate listed as implemented is a kubelet
// gate that can be set to the other value.
func TestImplementedAreSettable(t *testing.T) {
	all := KubeletGates()
	for name := range Implemented {
		spec, ok := all[name]
		if !ok {
			t.Errorf("Implemented lists %s, which the kubelet does not know", name)
			continue
		}
		if spec.LockToDefault {
			t.Errorf("Implemented lists %s, which is locked to its default", name)
		}
	}
}

// TestAllAlpha: the AllAlpha and AllBeta special gates turn on every
// alpha and beta gate not set otherwise, as the kubelet's (alone,
// AllAlpha fails: alpha gates depend on GenericWorkload, a beta gate off
// by default).
func TestAllAlpha(t *testing.T) {
	if _, err := New(klog.Background(), map[string]bool{"AllAlpha": true}); err == nil || !strings.Contains(err.Error(), "depends on features that are disabled: [GenericWorkload]") {
		t.Errorf("AllAlpha alone: %v, want the dependency on GenericWorkload", err)
	}
	g, err := New(klog.Background(), map[string]bool{"AllAlpha": true, "AllBeta": true, "ImageVolumeWithDigest": false})
	if err != nil {
		t.Fatal(err)
	}
	if !g.Enabled("InPlacePodVerticalScalingExclusiveCPUs") || !g.Enabled("GenericWorkload") || g.Enabled("ImageVolumeWithDigest") {
		t.Error("AllAlpha, AllBeta: an alpha or beta gate is off, or the one set off is on")
	}
	if un := g.Unimplemented(); !slices.Contains(un, "InPlacePodVerticalScalingExclusiveCPUs") || slices.Contains(un, "AllAlpha") {
		t.Errorf("Unimplemented() = %v, want the alpha gates AllAlpha turned on, not AllAlpha", un)
	}
}

// TestKubeletGatesAreValid: the generated table is accepted by
// component-base's featuregate (its dependencies agree with the stages).
func TestKubeletGatesAreValid(t *testing.T) {
	if _, err := newGate(); err != nil {
		t.Fatal(err)
	}
}

// TestNewConcurrently builds gates from many goroutines, as a fleet starts
// its agents: under -race, component-base's AddDependencies writing the
// package's dependency table (it sorts the map it is given) was a race.
func TestNewConcurrently(t *testing.T) {
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if _, err := New(klog.Background(), map[string]bool{"ExtendWebSocketsToKubelet": false}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}
