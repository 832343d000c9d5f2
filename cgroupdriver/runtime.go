package cgroupdriver

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RuntimeConfigGetter is the CRI call RuntimeCgroupDriver needs; the
// RuntimeService of k8s.io/cri-api (and k8s.io/cri-client's remote runtime)
// implements it.
type RuntimeConfigGetter interface {
	RuntimeConfig(ctx context.Context) (*runtimeapi.RuntimeConfigResponse, error)
}

// RuntimeCgroupDriver asks the container runtime which cgroup driver it
// uses. ok is false, with a nil error, when the runtime does not implement
// RuntimeConfig (gRPC Unimplemented) or reports no Linux configuration: then
// there is nothing to check. Any other failure is returned; the call is made
// once (callers retry while the runtime starts).
func RuntimeCgroupDriver(ctx context.Context, rs RuntimeConfigGetter) (driver runtimeapi.CgroupDriver, ok bool, err error) {
	resp, err := rs.RuntimeConfig(ctx)
	if err != nil {
		if status.Code(err) == codes.Unimplemented {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("get runtime config: %w", err)
	}
	linux := resp.GetLinux()
	if linux == nil {
		return 0, false, nil
	}
	return linux.GetCgroupDriver(), true, nil
}

// CheckRuntimeDriver returns an error when the configured cgroup driver
// (KubeletConfiguration cgroupDriver) is not the one the runtime reports.
// ok is false when the runtime did not report one (see RuntimeCgroupDriver):
// nothing is checked then. Node agent and runtime must agree, or the
// runtime creates container cgroups outside the pod hierarchy.
//
// The upstream kubelet (KubeletCgroupDriverFromCRI) silently adopts the
// runtime's driver instead; nodekit refuses to start, so a configuration
// that says one thing and does another is fixed where it is written.
func CheckRuntimeDriver(configured string, runtime runtimeapi.CgroupDriver, ok bool) error {
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
