package features

import (
	"fmt"
	"slices"

	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"
)

// The gates nodekit's modules read (see Implemented for what each one
// switches).
const (
	// ExtendWebSocketsToKubelet: the node API translates a
	// v5.channel.k8s.io WebSocket exec or attach to SPDY and tunnels a
	// SPDY-over-WebSocket port-forward (server/), and the node declares the
	// feature.
	ExtendWebSocketsToKubelet featuregate.Feature = "ExtendWebSocketsToKubelet"
	// InPlacePodLevelResourcesVerticalScaling: a resize of a pod's
	// pod-level resources (spec.resources) is allocated (pods/); off, it
	// is Infeasible, and the node does not declare the feature.
	InPlacePodLevelResourcesVerticalScaling featuregate.Feature = "InPlacePodLevelResourcesVerticalScaling"
	// InPlacePodVerticalScalingExclusiveCPUs and
	// InPlacePodVerticalScalingExclusiveMemory (alpha, off): off, an
	// in-place resize of a Guaranteed pod's CPU (memory) under the static
	// CPU (Static memory) manager policy is Infeasible (pods/). nodekit
	// does not resize exclusive CPUs or memory: on, they are reported as
	// not implemented.
	InPlacePodVerticalScalingExclusiveCPUs   featuregate.Feature = "InPlacePodVerticalScalingExclusiveCPUs"
	InPlacePodVerticalScalingExclusiveMemory featuregate.Feature = "InPlacePodVerticalScalingExclusiveMemory"
	// ResourceHealthStatus: the health of a container's devices (device
	// plugins, DRA drivers) is reported in its allocatedResourcesStatus.
	ResourceHealthStatus featuregate.Feature = "ResourceHealthStatus"
	// KubeletCrashLoopBackOffMax: crashLoopBackOff.maxContainerRestartPeriod
	// is defaulted and applied.
	KubeletCrashLoopBackOffMax featuregate.Feature = "KubeletCrashLoopBackOffMax"
	// KubeletEnsureSecretPulledImages: imagePullCredentialsVerificationPolicy
	// is defaulted and applied.
	KubeletEnsureSecretPulledImages featuregate.Feature = "KubeletEnsureSecretPulledImages"
)

// Gates are a node's feature gates: the kubelet v1.37's (KubeletGates),
// each at its default unless the configuration's featureGates
// (--feature-gates) set it. A nil *Gates is every gate at its default. The
// agent builds one from its configuration and gives it to each module
// through the module's options; nothing reads a process-wide gate.
type Gates struct {
	// differ are the gates whose value is not their default, as set
	// (AllAlpha and AllBeta set every gate of their stage): a node keeps
	// these few values, not a feature gate of its own, so that a process
	// running many agents does not keep hundreds of gate specs for each.
	differ map[featuregate.Feature]bool
}

// defaults are every gate's default, AllAlpha and AllBeta (false) too.
var defaults = func() map[featuregate.Feature]bool {
	out := map[featuregate.Feature]bool{"AllAlpha": false, "AllBeta": false}
	for name, spec := range kubeletGates {
		out[name] = spec.Default
	}
	return out
}()

// New returns the gates with set applied, validated as the kubelet does at
// start: an unknown gate, a gate locked to its default set to the other
// value, or a gate enabled whose dependencies are disabled is an error
// (the kubelet's error text). Setting a GA or deprecated gate is logged as
// the kubelet logs it.
func New(logger klog.Logger, set map[string]bool) (*Gates, error) {
	if len(set) == 0 {
		// Every gate at its default, which is what the gate below
		// reports with nothing set (TestDefaults), without building it:
		// component-base's gate copies the set of the gates queried
		// before on each first query, so reading every gate costs ~3 ms
		// per agent, most of a fleet's ParseFlags.
		return &Gates{}, nil
	}
	g, err := newGate()
	if err != nil {
		return nil, err
	}
	if err := g.SetFromMapWithLogger(logger, set); err != nil {
		return nil, err
	}
	differ := map[featuregate.Feature]bool{}
	for name, def := range defaults {
		if on := g.Enabled(name); on != def {
			differ[name] = on
		}
	}
	return &Gates{differ: differ}, nil
}

// Enabled reports whether the gate named f is on. It panics on a gate the
// kubelet does not know, as the kubelet's gate does (a programming error:
// use the constants of this package).
func (g *Gates) Enabled(f featuregate.Feature) bool {
	def, ok := defaults[f]
	if !ok {
		panic(fmt.Errorf("feature %q is not a kubelet feature gate", f))
	}
	if g != nil {
		if on, ok := g.differ[f]; ok {
			return on
		}
	}
	return def
}

// EnabledName is Enabled for a gate's name, false for a gate the kubelet
// does not know (nodedeclaredfeatures' FeatureGate).
func (g *Gates) EnabledName(name string) bool {
	if _, ok := defaults[featuregate.Feature(name)]; !ok {
		return false
	}
	return g.Enabled(featuregate.Feature(name))
}

// Implemented are the gates whose value nodekit acts on, with what it
// does when the gate is at the other value than its default; a gate not
// listed here that the configuration sets to a non-default value is
// accepted (the kubelet knows it) but has no effect in nodekit
// (Unimplemented). Locked gates cannot be set to a non-default value and
// are not listed. A gate of nodedeclaredfeatures always switches the
// node's declared feature (pods.NodeDeclaredFeatures reads the gates),
// which alone does not make it implemented (the agent reports such a gate
// as partly implemented).
var Implemented = map[featuregate.Feature]string{
	ExtendWebSocketsToKubelet:               "off: WebSocket exec, attach and port-forward are proxied to the runtime untranslated, and the feature is not declared",
	InPlacePodLevelResourcesVerticalScaling: "off: a resize of pod-level resources is Infeasible, and the feature is not declared",
	ResourceHealthStatus:                    "off: devices' health is not reported in allocatedResourcesStatus",
	KubeletCrashLoopBackOffMax:              "off: crashLoopBackOff.maxContainerRestartPeriod is not defaulted nor applied",
	KubeletEnsureSecretPulledImages:         "off: imagePullCredentialsVerificationPolicy is not defaulted",
}

// Unimplemented returns, sorted, the gates g sets to a value other than
// their default (one by one, or through AllAlpha and AllBeta) that nodekit
// does not act on (Implemented); the agent logs them with its other
// accepted but unimplemented settings.
func (g *Gates) Unimplemented() []string {
	if g == nil {
		return nil
	}
	var out []string
	for name := range g.differ {
		if _, ok := Implemented[name]; ok || name == "AllAlpha" || name == "AllBeta" {
			continue
		}
		out = append(out, string(name))
	}
	slices.Sort(out)
	return out
}

// gate is what nodekit uses of component-base's feature gate.
type gate interface {
	featuregate.MutableVersionedFeatureGate
	featuregate.MutableFeatureGateWithLogger
}

// newGate returns a feature gate that knows the kubelet's gates at their
// defaults.
func newGate() (gate, error) {
	g := featuregate.NewFeatureGate()
	if err := g.Add(kubeletGates); err != nil {
		return nil, fmt.Errorf("kubelet feature gates: %w", err)
	}
	// A copy: AddDependencies sorts and writes the map it is given, and
	// agents start concurrently in a fleet.
	if err := g.AddDependencies(KubeletGateDependencies()); err != nil {
		return nil, fmt.Errorf("kubelet feature gate dependencies: %w", err)
	}
	return g, nil
}

// KubeletGates returns the feature gates the kubelet v1.37 accepts, with
// their default, stage and lock at that version (the spec's Version is
// nil). e2e/kubeletparity compares it with the kubelet's own.
func KubeletGates() map[featuregate.Feature]featuregate.FeatureSpec {
	g, err := newGate()
	if err != nil {
		panic(err)
	}
	all := g.GetAll()
	for name, spec := range all {
		spec.Version = nil
		all[name] = spec
	}
	return all
}

// KubeletGateDependencies returns, for each gate that has any, the gates it
// needs enabled, as the kubelet v1.37 declares them.
func KubeletGateDependencies() map[featuregate.Feature][]featuregate.Feature {
	out := make(map[featuregate.Feature][]featuregate.Feature, len(kubeletGateDependencies))
	for k, v := range kubeletGateDependencies {
		out[k] = slices.Clone(v)
	}
	return out
}
