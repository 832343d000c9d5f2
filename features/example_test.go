package features_test

import (
	"fmt"

	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/features"
)

// A node's gates from a KubeletConfiguration's featureGates: validated as
// the kubelet validates them, read by the modules through their options.
func Example() {
	gates, err := features.New(klog.Background(), map[string]bool{
		"ExtendWebSocketsToKubelet":              false,
		"InPlacePodVerticalScalingExclusiveCPUs": true,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(gates.Enabled(features.ExtendWebSocketsToKubelet))
	fmt.Println(gates.Enabled(features.ResourceHealthStatus))
	fmt.Println(gates.Unimplemented())

	_, err = features.New(klog.Background(), map[string]bool{"NoSuchGate": true})
	fmt.Println(err)
	// Output:
	// false
	// true
	// [InPlacePodVerticalScalingExclusiveCPUs]
	// unrecognized feature gate: NoSuchGate
}
