// Package dradriver is the e2e module's DRA driver: a kubelet plugin built
// with k8s.io/dynamic-resource-allocation's kubeletplugin helper, as a
// vendor's driver is. It publishes one ResourceSlice with a few devices on
// its node, writes a CDI spec in which each device sets the environment
// variable DRA_E2E_DEVICE_<n> to its name, and prepares a claim by
// returning the CDI device IDs of the devices allocated to it.
package dradriver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

// Options configures a Driver.
type Options struct {
	// Name is the driver's name (a DNS subdomain, e.g. "gpu.e2e.nodekit.dev").
	Name string
	// NodeName is the node whose devices the driver publishes.
	NodeName string
	// Client publishes the ResourceSlice and reads the claims.
	Client kubernetes.Interface
	// RootDir is the node agent's root directory: the driver registers in
	// <RootDir>/plugins_registry and serves <RootDir>/plugins/<Name>/dra.sock.
	RootDir string
	// CDIDir is where the CDI spec is written (a directory the container
	// runtime reads CDI specs from).
	CDIDir string
	// Devices is how many devices the node has: dev-0 ... dev-<n-1>.
	Devices int
	// Health makes the driver report its devices' health (Healthy unless
	// SetHealth says otherwise) to the node agent every few seconds and on
	// each change; without it the driver declines health reporting.
	Health bool
}

// Driver is a running DRA driver.
type Driver struct {
	opts    Options
	helper  *kubeletplugin.Helper
	cdiSpec string

	mu         sync.Mutex
	prepared   map[types.UID][]string
	prepares   int
	unprepares int
	unhealthy  map[string]bool
	// healthChanged is closed (and replaced) by SetHealth.
	healthChanged chan struct{}
}

// CDIKind is the CDI kind of the driver's devices: "<Name>/dev".
func (d *Driver) CDIKind() string { return d.opts.Name + "/dev" }

// Start writes the CDI spec, starts the kubelet plugin (it registers with
// the node agent's plugin manager) and publishes the node's ResourceSlice.
func Start(ctx context.Context, opts Options) (*Driver, error) {
	if opts.Devices <= 0 {
		return nil, errors.New("DRA driver: no devices")
	}
	d := &Driver{opts: opts, prepared: map[types.UID][]string{}, unhealthy: map[string]bool{}, healthChanged: make(chan struct{})}
	if err := d.writeCDISpec(); err != nil {
		return nil, err
	}
	pluginDir := filepath.Join(opts.RootDir, "plugins", opts.Name)
	registry := filepath.Join(opts.RootDir, "plugins_registry")
	for _, dir := range []string{pluginDir, registry} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, err
		}
	}
	h, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(opts.Name),
		kubeletplugin.NodeName(opts.NodeName),
		kubeletplugin.KubeClient(opts.Client),
		kubeletplugin.RegistrarDirectoryPath(registry),
		kubeletplugin.PluginDataDirectoryPath(pluginDir),
	)
	if err != nil {
		os.Remove(d.cdiSpec)
		return nil, fmt.Errorf("start DRA driver %s: %w", opts.Name, err)
	}
	d.helper = h
	devices := make([]resourceapi.Device, opts.Devices)
	for i := range devices {
		devices[i] = resourceapi.Device{Name: fmt.Sprintf("dev-%d", i)}
	}
	err = h.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		opts.NodeName: {Slices: []resourceslice.Slice{{Devices: devices}}},
	}})
	if err != nil {
		d.Stop()
		return nil, fmt.Errorf("DRA driver %s: publish the ResourceSlice: %w", opts.Name, err)
	}
	return d, nil
}

// Stop stops the plugin (its registration socket goes) and removes the
// CDI spec. The published ResourceSlice stays: the node agent deletes it
// once the driver has been gone for its grace period.
func (d *Driver) Stop() {
	if d.helper != nil {
		d.helper.Stop()
	}
	os.Remove(d.cdiSpec)
}

// EnvName is the environment variable device dev-<i> sets.
func EnvName(device string) string {
	return "DRA_E2E_" + strings.ToUpper(strings.ReplaceAll(device, "-", "_"))
}

// writeCDISpec writes the CDI spec of the node's devices.
func (d *Driver) writeCDISpec() error {
	type edits struct {
		Env []string `json:"env"`
	}
	type dev struct {
		Name           string `json:"name"`
		ContainerEdits edits  `json:"containerEdits"`
	}
	spec := struct {
		Version string `json:"cdiVersion"`
		Kind    string `json:"kind"`
		Devices []dev  `json:"devices"`
	}{Version: "0.6.0", Kind: d.CDIKind()}
	for i := range d.opts.Devices {
		name := fmt.Sprintf("dev-%d", i)
		spec.Devices = append(spec.Devices, dev{Name: name, ContainerEdits: edits{Env: []string{EnvName(name) + "=" + name}}})
	}
	blob, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(d.opts.CDIDir, 0o755); err != nil {
		return err
	}
	d.cdiSpec = filepath.Join(d.opts.CDIDir, strings.ReplaceAll(d.opts.Name, "/", "_")+".json")
	return os.WriteFile(d.cdiSpec, blob, 0o644)
}

// PrepareResourceClaims returns, for each claim, the CDI devices of the
// devices allocated to it from this driver.
func (d *Driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		d.prepares++
		var res kubeletplugin.PrepareResult
		var names []string
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != d.opts.Name {
				continue
			}
			names = append(names, r.Device)
			res.Devices = append(res.Devices, kubeletplugin.Device{
				Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
				CDIDeviceIDs: []string{d.CDIKind() + "=" + r.Device},
			})
		}
		d.prepared[c.UID] = names
		out[c.UID] = res
	}
	return out, nil
}

// UnprepareResourceClaims forgets the claims.
func (d *Driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[types.UID]error{}
	for _, c := range claims {
		d.unprepares++
		delete(d.prepared, c.UID)
		out[c.UID] = nil
	}
	return out, nil
}

// HandleError logs background errors (publishing the ResourceSlice).
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg, "driver", d.opts.Name)
}

// SetHealth makes the driver report device (dev-<n>) healthy or not.
func (d *Driver) SetHealth(device string, healthy bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.unhealthy[device] = !healthy
	close(d.healthChanged)
	d.healthChanged = make(chan struct{})
}

// healthResend is how often the driver repeats its health report, well
// within the node agent's 30 s default health timeout.
const healthResend = 5 * time.Second

// WatchHealthStatus reports every device's health every healthResend and
// on each SetHealth, with Options.Health; without, it declines.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	if !d.opts.Health {
		return kubeletplugin.ErrHealthNotSupported
	}
	for {
		d.mu.Lock()
		changed := d.healthChanged
		var report kubeletplugin.DeviceHealthReport
		for i := range d.opts.Devices {
			name := fmt.Sprintf("dev-%d", i)
			h := kubeletplugin.HealthStatusHealthy
			if d.unhealthy[name] {
				h = kubeletplugin.HealthStatusUnhealthy
			}
			report.Devices = append(report.Devices, kubeletplugin.DeviceHealth{PoolName: d.opts.NodeName, DeviceName: name, Health: h, LastUpdated: time.Now()})
		}
		d.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case reports <- report:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-time.After(healthResend):
		}
	}
}

// Prepared returns the devices of each claim prepared and not unprepared
// since, by claim UID, and how many claims NodePrepareResources and
// NodeUnprepareResources were called for.
func (d *Driver) Prepared() (claims map[types.UID][]string, prepares, unprepares int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	claims = map[types.UID][]string{}
	for uid, names := range d.prepared {
		claims[uid] = slices.Clone(names)
	}
	return claims, d.prepares, d.unprepares
}
