package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/go-logr/logr"

	"github.com/nodekit/nodekit/cgroupdriver"
	"github.com/nodekit/nodekit/runtime"
)

// errSwapOn is the kubelet's refusal to start on a node with swap on.
var errSwapOn = errors.New("running with swap on is not supported, please disable swap or set --fail-swap-on flag to false")

// checkSwap is the kubelet's start-time swap checks (cmd/kubelet and
// cm.NewContainerManager): with swap on (/proc/swaps lists a device) the
// agent refuses to start unless failSwapOn is false, and LimitedSwap
// needs cgroup v2. Containers' swap limits are the pod manager's
// (runtime.SwapOptions).
func checkSwap(cfg *Config, driver cgroupdriver.Driver, logger logr.Logger) error {
	return checkSwapWith("/proc/swaps", cfg, driver, logger)
}

// checkSwapWith is checkSwap reading the swaps file at procSwaps.
func checkSwapWith(procSwaps string, cfg *Config, driver cgroupdriver.Driver, logger logr.Logger) error {
	on, err := swapOn(procSwaps, logger)
	if err != nil {
		return fmt.Errorf("failed to determine if swap is on: %w", err)
	}
	kc := &cfg.Kubelet
	if on && *kc.FailSwapOn {
		return errSwapOn
	}
	if on {
		// The volume manager mounts tmpfs volumes with noswap where the
		// kernel has it (Linux 6.4, outside a user namespace).
		logger.Info("Swap is on: accepted but not implemented: the kubelet's PossibleMemoryBackedVolumesOnDisk event on a kernel without the tmpfs noswap option")
	}
	if kc.MemorySwap.SwapBehavior == runtime.LimitedSwap {
		v, err := driver.Version()
		if err != nil {
			return fmt.Errorf("memorySwap.swapBehavior LimitedSwap: cgroup version: %w", err)
		}
		if v != 2 {
			return errors.New("swap feature is enabled and LimitedSwap but it is only supported with cgroupv2")
		}
	}
	if !*kc.FailSwapOn && kc.MemorySwap.SwapBehavior == "" {
		logger.Info("NoSwap is set due to memorySwapBehavior not specified", "memorySwapBehavior", kc.MemorySwap.SwapBehavior, "FailSwapOn", *kc.FailSwapOn)
	}
	return nil
}

// swapOn reports whether the /proc/swaps at path lists a swap device
// (more than its header line); a missing file means no swap, as the
// kubelet's IsSwapOn.
func swapOn(path string, logger logr.Logger) (bool, error) {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		logger.Info("File does not exist, assuming that swap is disabled", "path", path)
		return false, nil
	}
	if err != nil {
		return false, err
	}
	data = bytes.TrimSpace(data)
	if bytes.Count(data, []byte("\n")) == 0 {
		return false, nil
	}
	logger.Info("Swap is on", "/proc/swaps contents", string(data))
	return true, nil
}
