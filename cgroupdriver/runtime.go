package cgroupdriver

import (
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// checkRuntimeDriver returns an error when the configured cgroup driver
// (KubeletConfiguration cgroupDriver) is not the one the runtime reports.
// ok is false when the runtime did not report one (it does not implement
// CRI RuntimeConfig, see the runtime package's Client.CgroupDriver): nothing
// is checked then. Node agent and runtime must agree, or the
// runtime creates container cgroups outside the pod hierarchy.
//
// The upstream kubelet (KubeletCgroupDriverFromCRI) silently adopts the
// runtime's driver instead; nodekit refuses to start, so a configuration
// that says one thing and does another is fixed where it is written.
func checkRuntimeDriver(configured string, runtime runtimeapi.CgroupDriver, ok bool) error {
	if !ok {
		return nil
	}
	var got string
	switch runtime {
	case runtimeapi.CgroupDriver_SYSTEMD:
		got = DriverSystemd
	case runtimeapi.CgroupDriver_CGROUPFS:
		got = DriverCgroupfs
	default:
		return fmt.Errorf("container runtime reports unknown cgroup driver %d", runtime)
	}
	if configured != got {
		return fmt.Errorf("cgroup driver mismatch: the node agent is configured with cgroupDriver %q but the container runtime uses %q; set cgroupDriver: %q in the agent configuration or configure the runtime for %q (e.g. containerd's SystemdCgroup option), they must agree", configured, got, got, configured)
	}
	return nil
}
