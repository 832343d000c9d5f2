package dra

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	drahealthv1 "k8s.io/kubelet/pkg/apis/dra-health/v1"
	drahealthv1alpha1 "k8s.io/kubelet/pkg/apis/dra-health/v1alpha1"

	"github.com/nodekit/nodekit/internal/atomicfile"
)

// The Manager as the pod lifecycle loop's pods.ResourceHealthProvider: the
// kubelet's ResourceHealthStatus (beta, on by default in 1.37) for DRA.
// A plugin that lists a DRAResourceHealth service among its supported
// versions is watched (NodeWatchResources); the health it reports for its
// devices goes into the statuses of the containers whose claims hold them
// ("claim:<name>[/<request>]" entries), Unknown for a device without a
// report or whose report is older than its health check timeout.

// DefaultHealthTimeout is how long a device's reported health holds when
// the plugin gives no health check timeout of its own, the kubelet's.
const DefaultHealthTimeout = 30 * time.Second

// healthServices are the DRAResourceHealth services the Manager watches,
// newest first, the kubelet v1.37's.
var healthServices = []string{drahealthv1.DRAResourceHealthService, drahealthv1alpha1.DRAResourceHealthService}

const (
	// healthUpdatesBuffer is how many pods whose devices changed health
	// may wait for the pod lifecycle loop.
	healthUpdatesBuffer = 100
	// maxDevicesPerDriver bounds the health entries kept per driver, as
	// the kubelet's: a plugin inventing device names cannot grow it.
	maxDevicesPerDriver = 16384
	// healthRetry is the pause before a broken health stream is opened
	// again.
	healthRetry = 5 * time.Second
)

// deviceHealth is a device's last reported health.
type deviceHealth struct {
	health  v1.ResourceHealthStatus
	message string
	updated time.Time
	timeout time.Duration
}

// HealthCheckpointFile is the file in Options.StateDir that keeps the
// devices' reported health across restarts, the kubelet's
// dra_health_state (its format too): after a restart a device keeps the
// health its plugin last reported until that report times out, instead of
// turning Unknown until the plugin reports again.
const HealthCheckpointFile = "dra_health_state"

// checkpointDevice is a device in HealthCheckpointFile: the kubelet's
// state.DeviceHealth, whose JSON names are its Go field names.
type checkpointDevice struct {
	PoolName           string
	DeviceName         string
	Health             v1.ResourceHealthStatus
	LastUpdated        time.Time
	HealthCheckTimeout time.Duration
	Message            string
}

// checkpointDriver is a driver in HealthCheckpointFile (the kubelet's
// state.DriverHealthState), its devices by "<pool>/<device>".
type checkpointDriver struct {
	Devices map[string]checkpointDevice
}

// healthCache is the devices' reported health by driver, then by
// "<pool>/<device>", kept in path (HealthCheckpointFile; "" keeps it in
// memory only).
type healthCache struct {
	path    string
	mu      sync.RWMutex
	drivers map[string]map[string]deviceHealth
}

// load reads the checkpoint, as the kubelet's newHealthInfoCache: a
// missing file is an empty cache.
func (c *healthCache) load() error {
	if c.path == "" {
		return nil
	}
	data, err := os.ReadFile(c.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the DRA health checkpoint %s: %w", c.path, err)
	}
	var saved map[string]checkpointDriver
	if err := json.Unmarshal(data, &saved); err != nil {
		return fmt.Errorf("decode the DRA health checkpoint %s: %w", c.path, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drivers = map[string]map[string]deviceHealth{}
	for driver, d := range saved {
		devices := map[string]deviceHealth{}
		for key, dev := range d.Devices {
			timeout := dev.HealthCheckTimeout
			if timeout == 0 {
				timeout = DefaultHealthTimeout
			}
			devices[key] = deviceHealth{health: dev.Health, message: dev.Message, updated: dev.LastUpdated, timeout: timeout}
		}
		c.drivers[driver] = devices
	}
	return nil
}

// save writes the checkpoint whole; c.mu held.
func (c *healthCache) save() error {
	if c.path == "" {
		return nil
	}
	out := make(map[string]checkpointDriver, len(c.drivers))
	for driver, devices := range c.drivers {
		d := checkpointDriver{Devices: make(map[string]checkpointDevice, len(devices))}
		for key, dev := range devices {
			pool, name, _ := strings.Cut(key, "/")
			d.Devices[key] = checkpointDevice{PoolName: pool, DeviceName: name, Health: dev.health,
				LastUpdated: dev.updated, HealthCheckTimeout: dev.timeout, Message: dev.message}
		}
		out[driver] = d
	}
	data, err := json.Marshal(out)
	if err != nil {
		return fmt.Errorf("encode the DRA health checkpoint: %w", err)
	}
	if err := atomicfile.Write(c.path, data); err != nil {
		return fmt.Errorf("write the DRA health checkpoint %s: %w", c.path, err)
	}
	return nil
}

// get returns the device's health, Unknown when it has no report or the
// report timed out.
func (c *healthCache) get(driver, pool, device string, now time.Time) deviceHealth {
	c.mu.RLock()
	defer c.mu.RUnlock()
	d, ok := c.drivers[driver][pool+"/"+device]
	if !ok || now.Sub(d.updated) > d.timeout {
		return deviceHealth{health: v1.ResourceHealthStatusUnknown}
	}
	return d
}

// update records a report of driver and returns the devices whose health,
// message or timeout changed, and those not reported whose last report
// timed out (they turn Unknown and are forgotten), as the kubelet's; the
// checkpoint is written when any did (err says it could not be).
func (c *healthCache) update(driver string, reported map[string]deviceHealth, now time.Time) (changed []string, ignored int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.drivers == nil {
		c.drivers = map[string]map[string]deviceHealth{}
	}
	devices := c.drivers[driver]
	if devices == nil {
		devices = map[string]deviceHealth{}
		c.drivers[driver] = devices
	}
	for key, d := range reported {
		old, ok := devices[key]
		if !ok && len(devices) >= maxDevicesPerDriver {
			ignored++
			continue
		}
		if !ok || old.health != d.health || old.message != d.message || old.timeout != d.timeout {
			changed = append(changed, key)
		}
		devices[key] = d
	}
	deleted := false
	for key, d := range devices {
		if _, ok := reported[key]; ok || now.Sub(d.updated) <= d.timeout {
			continue
		}
		if d.health != v1.ResourceHealthStatusUnknown {
			changed = append(changed, key)
		}
		delete(devices, key)
		deleted = true
	}
	if len(changed) > 0 || deleted {
		err = c.save()
	}
	return changed, ignored, err
}

// clear forgets driver's devices (its health stream ended) and writes the
// checkpoint, as the kubelet's clearDriver.
func (c *healthCache) clear(driver string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.drivers, driver)
	return c.save()
}

// HealthUpdates delivers the UID of each pod one of whose claims' devices
// changed health in a plugin's report; the pod lifecycle loop syncs the
// pod so its status follows. A pod is dropped (and logged) when the
// channel's buffer is full.
func (m *Manager) HealthUpdates() <-chan types.UID { return m.healthUpdates }

// UpdateAllocatedResourcesStatus sets, in each of status's container
// statuses, one allocatedResourcesStatus entry per claim (and request) the
// container uses, named "claim:<pod claim name>" or
// "claim:<pod claim name>/<request>", listing the prepared devices (by
// their first CDI device ID, else "<driver>/<pool>/<device>") with the
// health their plugin reported, as the kubelet's DRA manager. Entries left
// without devices are dropped; entries of other resources are kept.
func (m *Manager) UpdateAllocatedResourcesStatus(pod *v1.Pod, status *v1.PodStatus) {
	now := time.Now()
	claimNames := map[string]string{}
	for _, cs := range pod.Status.ResourceClaimStatuses {
		if cs.ResourceClaimName != nil {
			claimNames[cs.Name] = *cs.ResourceClaimName
		}
	}
	for i := range status.ContainerStatuses {
		cs := &status.ContainerStatuses[i]
		j := slices.IndexFunc(pod.Spec.Containers, func(c v1.Container) bool { return c.Name == cs.Name })
		if j < 0 || len(pod.Spec.Containers[j].Resources.Claims) == 0 {
			continue
		}
		for _, claim := range pod.Spec.Containers[j].Resources.Claims {
			name := claimNames[claim.Name]
			if name == "" {
				for k := range pod.Spec.ResourceClaims {
					if pod.Spec.ResourceClaims[k].Name == claim.Name {
						if n, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[k]); err == nil && n != nil {
							name = *n
						}
					}
				}
			}
			if name == "" {
				continue
			}
			m.mu.RLock()
			info, ok := m.claims[pod.Namespace+"/"+name]
			var rs v1.ResourceStatus
			if ok {
				rs = m.claimHealth(info, claim, now)
			}
			m.mu.RUnlock()
			if !ok {
				continue
			}
			if k := slices.IndexFunc(cs.AllocatedResourcesStatus, func(s v1.ResourceStatus) bool { return s.Name == rs.Name }); k >= 0 {
				cs.AllocatedResourcesStatus[k] = rs
			} else {
				cs.AllocatedResourcesStatus = append(cs.AllocatedResourcesStatus, rs)
			}
		}
		if cs.AllocatedResourcesStatus != nil {
			cs.AllocatedResourcesStatus = slices.DeleteFunc(cs.AllocatedResourcesStatus, func(s v1.ResourceStatus) bool { return len(s.Resources) == 0 })
		}
	}
}

// claimHealth is the allocatedResourcesStatus entry of a container's use
// of claim. Called with m.mu read-held.
func (m *Manager) claimHealth(info *claimInfo, claim v1.ResourceClaim, now time.Time) v1.ResourceStatus {
	name := "claim:" + claim.Name
	if claim.Request != "" {
		name += "/" + claim.Request
	}
	rs := v1.ResourceStatus{Name: v1.ResourceName(name), Resources: []v1.ResourceHealth{}}
	drivers := make([]string, 0, len(info.DriverState))
	for d := range info.DriverState {
		drivers = append(drivers, d)
	}
	slices.Sort(drivers)
	seen := sets.New[v1.ResourceID]()
	for _, driver := range drivers {
		for _, dev := range info.DriverState[driver].Devices {
			if claim.Request != "" && len(dev.RequestNames) > 0 && !slices.Contains(dev.RequestNames, resourceclaim.BaseRequestRef(claim.Request)) {
				continue
			}
			h := m.health.get(driver, dev.PoolName, dev.DeviceName, now)
			id := v1.ResourceID(fmt.Sprintf("%s/%s/%s", driver, dev.PoolName, dev.DeviceName))
			if len(dev.CDIDeviceIDs) > 0 {
				id = v1.ResourceID(dev.CDIDeviceIDs[0])
			}
			if seen.Has(id) {
				continue
			}
			seen.Insert(id)
			rh := v1.ResourceHealth{ResourceID: id, Health: h.health}
			if h.message != "" {
				msg := h.message
				rh.Message = &msg
			}
			rs.Resources = append(rs.Resources, rh)
		}
	}
	return rs
}

// pickHealthService returns the newest DRAResourceHealth service both the
// plugin and the Manager speak, "" when the plugin offers none.
func pickHealthService(services []string) string {
	for _, s := range healthServices {
		if slices.Contains(services, s) {
			return s
		}
	}
	return ""
}

// watchHealth keeps a NodeWatchResources stream open to p until ctx ends
// (the plugin is removed) or the plugin answers Unimplemented, opening it
// again healthRetry after it breaks, as the kubelet.
func (m *Manager) watchHealth(ctx context.Context, p *plugin) {
	logger := m.logger(ctx).WithValues("driverName", p.driver, "endpoint", p.endpoint)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		var stream drahealthv1.DRAResourceHealth_NodeWatchResourcesClient
		var err error
		switch p.healthService {
		case drahealthv1alpha1.DRAResourceHealthService:
			stream, err = drahealthv1.V1Alpha1ClientWrapper{Client: drahealthv1alpha1.NewDRAResourceHealthClient(p.conn)}.NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
		default:
			stream, err = drahealthv1.NewDRAResourceHealthClient(p.conn).NodeWatchResources(ctx, &drahealthv1.NodeWatchResourcesRequest{})
		}
		if err != nil {
			logger.V(3).Info("Failed to establish WatchResources stream, will retry", "err", err)
			return
		}
		logger.V(2).Info("Successfully started WatchResources health stream")
		err = m.handleHealthStream(ctx, stream, p.driver)
		logger.V(2).Info("WatchResources health stream has ended", "err", err)
		if status.Code(err) == codes.Unimplemented {
			logger.V(2).Info("Driver does not support WatchResources health stream, stopping")
			cancel()
		}
	}, healthRetry)
}

// handleHealthStream records the stream's reports until it ends, syncing
// the pods whose claims hold a device whose health changed; the driver's
// health is forgotten when it ends.
func (m *Manager) handleHealthStream(ctx context.Context, stream drahealthv1.DRAResourceHealth_NodeWatchResourcesClient, driver string) error {
	logger := m.logger(ctx).WithValues("driverName", driver)
	defer func() {
		if err := m.health.clear(driver); err != nil {
			logger.Error(err, "Failed to clear health info cache for driver")
		}
	}()
	for {
		resp, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		now := time.Now()
		reported := map[string]deviceHealth{}
		for _, d := range resp.GetDevices() {
			timeout := DefaultHealthTimeout
			if s := d.GetHealthCheckTimeoutSeconds(); s > 0 {
				timeout = time.Duration(s) * time.Second
			}
			msg := d.GetMessage()
			if len(msg) > v1.ResourceHealthMessageMaxLength {
				msg = msg[:v1.ResourceHealthMessageMaxLength-3] + "..."
			}
			health := v1.ResourceHealthStatusUnknown
			switch d.GetHealth() {
			case drahealthv1.HealthStatus_HEALTHY:
				health = v1.ResourceHealthStatusHealthy
			case drahealthv1.HealthStatus_UNHEALTHY:
				health = v1.ResourceHealthStatusUnhealthy
			}
			reported[d.GetDevice().GetPoolName()+"/"+d.GetDevice().GetDeviceName()] = deviceHealth{health: health, message: msg, updated: now, timeout: timeout}
		}
		changed, ignored, err := m.health.update(driver, reported, now)
		if err != nil {
			logger.Error(err, "Failed to save health checkpoint after update. Kubelet restart may lose the device health information.")
		}
		if ignored > 0 {
			logger.Error(nil, "Health report contains more devices than the cache keeps per driver, ignoring new devices beyond the limit", "limit", maxDevicesPerDriver, "ignoredDevices", ignored)
		}
		if len(changed) == 0 {
			continue
		}
		keys := sets.New(changed...)
		pods := sets.New[types.UID]()
		m.mu.RLock()
		for _, c := range m.claims {
			for _, dev := range c.DriverState[driver].Devices {
				if keys.Has(dev.PoolName + "/" + dev.DeviceName) {
					for uid := range c.PodUIDs {
						pods.Insert(types.UID(uid))
					}
				}
			}
		}
		m.mu.RUnlock()
		for _, uid := range sets.List(pods) {
			select {
			case m.healthUpdates <- uid:
			default:
				logger.Error(nil, "DRA health update channel is full, discarding pod update notification", "podUID", uid)
			}
		}
	}
}
