package devices

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/devices/internal/checkpoint"
	"github.com/nodekit/nodekit/internal/runner"
	"github.com/nodekit/nodekit/internal/unixsock"
	"github.com/nodekit/nodekit/resources/topologymanager"
)

// EndpointStopGracePeriod is how long a resource whose plugin went away
// keeps its capacity (with 0 allocatable) before it leaves the node, as the
// kubelet's endpointStopGracePeriod.
const EndpointStopGracePeriod = 5 * time.Minute

// nodeWithoutTopology is the NUMA key of devices without topology.
const nodeWithoutTopology = -1

// Options configure a Manager.
type Options struct {
	// PluginDir is the device plugin directory, <root-dir>/device-plugins:
	// the registration socket kubelet.sock and the checkpoint live there,
	// and plugins' sockets are resolved in it. Required.
	PluginDir string
	// Clock is the time source of the stop grace period; the real clock
	// by default.
	Clock clock.PassiveClock
	// ActivePods returns the pods admitted on the node and not terminated;
	// devices of other pods are freed before each allocation. Nil frees
	// nothing.
	ActivePods func() []*v1.Pod
	// SourcesReady reports whether every pod source has delivered its pods
	// once; until then a container found running (ContainerRunning) keeps
	// its checkpointed devices without its plugin being registered (an
	// agent restart). Nil means ready.
	SourcesReady func() bool
	// ContainerRunning reports whether the runtime runs the named
	// container of the pod. Nil means never.
	ContainerRunning func(podUID, containerName string) bool
	// Registerer takes the kubelet's device plugin metrics; nil registers
	// nothing.
	Registerer prometheus.Registerer
	// NUMANodes are the machine's NUMA node IDs
	// (topology.Machine.NUMANodeIDs): the topology hints are sets of them.
	// NUMA nodes a plugin reports outside them are ignored.
	NUMANodes []int
	// Affinity returns the NUMA affinity the topology manager chose for a
	// container (topologymanager.Manager.GetAffinity): its devices are
	// taken from those NUMA nodes first. Nil is no affinity.
	Affinity func(podUID, containerName string) topologymanager.TopologyHint
}

// Manager is the kubelet's device manager: it serves the device plugin
// registration socket, keeps one endpoint per registered resource (its
// ListAndWatch stream gives the healthy and unhealthy devices), allocates
// devices to containers, and checkpoints the allocations. All methods are
// safe for concurrent use.
type Manager struct {
	opts    Options
	metrics *metrics

	cpMu sync.Mutex // serializes checkpoint writes, taken before mu

	mu        sync.Mutex
	endpoints map[string]*endpoint // by resource name
	healthy   map[string]sets.Set[string]
	unhealthy map[string]sets.Set[string]
	all       map[string]map[string]*pluginapi.Device
	pods      podDevices
	allocated map[string]sets.Set[string] // devices in use, by resource
	// reuse is, for the pod being admitted, the devices of its regular
	// init containers that its later containers may take, by resource.
	reuse   map[string]map[string]sets.Set[string]
	closed  bool
	streams sync.WaitGroup // runEndpoint goroutines; Add under mu while !closed

	// healthUpdates carries the pods whose devices changed health.
	healthUpdates chan types.UID
}

// New returns a Manager that has read the checkpoint in opts.PluginDir (a
// missing one is an empty state; a corrupt one is an error). It does not
// touch the filesystem otherwise until Run.
func New(opts Options) (*Manager, error) {
	if opts.PluginDir == "" {
		return nil, errors.New("device manager: PluginDir is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Affinity == nil {
		opts.Affinity = func(string, string) topologymanager.TopologyHint { return topologymanager.TopologyHint{} }
	}
	m := &Manager{
		opts:      opts,
		metrics:   newMetrics(opts.Registerer),
		endpoints: map[string]*endpoint{},
		healthy:   map[string]sets.Set[string]{},
		unhealthy: map[string]sets.Set[string]{},
		all:       map[string]map[string]*pluginapi.Device{},
		pods:      podDevices{},
		allocated: map[string]sets.Set[string]{},
		reuse:     map[string]map[string]sets.Set[string]{},

		healthUpdates: make(chan types.UID, healthUpdatesBuffer),
	}
	entries, registered, err := checkpoint.Read(opts.PluginDir)
	if err != nil && !errors.Is(err, checkpoint.ErrNotFound) {
		return nil, fmt.Errorf("device manager: %w", err)
	}
	for _, e := range entries {
		resp := &pluginapi.ContainerAllocateResponse{}
		if err := proto.Unmarshal(e.AllocResp, resp); err != nil {
			return nil, fmt.Errorf("device manager: checkpoint entry for pod %s container %s resource %s: %w", e.PodUID, e.ContainerName, e.ResourceName, err)
		}
		m.pods.insert(e.PodUID, e.ContainerName, e.ResourceName, e.DeviceIDs, resp)
	}
	m.allocated = m.pods.devices()
	// Until its plugin registers again, a checkpointed resource has no
	// devices and a stopped endpoint, so its capacity is 0 and it leaves
	// the node after the grace period (as the kubelet).
	for res := range registered {
		m.healthy[res] = sets.New[string]()
		m.unhealthy[res] = sets.New[string]()
		m.endpoints[res] = &endpoint{resource: res, stopped: true, stopTime: opts.Clock.Now()}
	}
	return m, nil
}

// SocketPath returns the registration socket's path.
func (m *Manager) SocketPath() string {
	return filepath.Join(m.opts.PluginDir, "kubelet.sock")
}

// Run removes stale sockets from the plugin directory (everything but the
// checkpoint, as the kubelet), serves the registration socket until ctx is
// done, then closes every plugin connection and removes the socket. A
// socket path too long for a unix socket address is logged as an error and
// the Manager runs without plugins (the node advertises no devices) rather
// than stopping the agent.
func (m *Manager) Run(ctx context.Context) error {
	log := logr.FromContextOrDiscard(ctx)
	if err := os.MkdirAll(m.opts.PluginDir, 0o750); err != nil {
		return fmt.Errorf("device manager: create %s: %w", m.opts.PluginDir, err)
	}
	if err := m.cleanupDir(log); err != nil {
		return err
	}
	if n := len(m.SocketPath()); n > unixsock.MaxPathLen {
		// The kubelet would fail its start here; an agent keeps its pods
		// and says plainly what it cannot do.
		log.Error(nil, "Device plugins cannot register on this node: the registration socket's path is longer than a unix socket address allows", "socket", m.SocketPath(), "length", n, "max", unixsock.MaxPathLen)
		<-ctx.Done()
		return nil
	}
	lis, err := net.Listen("unix", m.SocketPath())
	if err != nil {
		return fmt.Errorf("device manager: listen on %s: %w", m.SocketPath(), err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, &registration{m: m, ctx: logr.NewContext(ctx, log)})
	log.Info("Serving device plugin registration", "socket", m.SocketPath())
	err = runner.ServeGRPC(ctx, srv, lis)
	m.mu.Lock()
	m.closed = true
	eps := make([]*endpoint, 0, len(m.endpoints))
	for _, e := range m.endpoints {
		eps = append(eps, e)
	}
	m.mu.Unlock()
	for _, e := range eps {
		e.close()
	}
	m.streams.Wait()
	os.Remove(m.SocketPath())
	if err != nil {
		return fmt.Errorf("device manager: serve %s: %w", m.SocketPath(), err)
	}
	return nil
}

func (m *Manager) cleanupDir(log logr.Logger) error {
	names, err := os.ReadDir(m.opts.PluginDir)
	if err != nil {
		return fmt.Errorf("device manager: read %s: %w", m.opts.PluginDir, err)
	}
	for _, n := range names {
		if n.IsDir() || n.Name() == checkpoint.FileName {
			continue
		}
		p := filepath.Join(m.opts.PluginDir, n.Name())
		if err := os.Remove(p); err != nil {
			log.Error(err, "Failed to remove stale file in the device plugin directory", "path", p)
		}
	}
	return nil
}

// registration is the Registration gRPC service.
type registration struct {
	pluginapi.UnimplementedRegistrationServer
	m   *Manager
	ctx context.Context
}

// Register validates the request as the kubelet (a supported version, an
// extended resource name), connects to the plugin's socket, asks for its
// options and starts its ListAndWatch stream. A plugin registering a
// resource again replaces the previous endpoint.
func (r *registration) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	log := logr.FromContextOrDiscard(r.ctx).WithValues("resourceName", req.ResourceName)
	log.Info("Got registration request from device plugin")
	r.m.metrics.registrations.WithLabelValues(req.ResourceName).Inc()
	compatible := false
	for _, v := range pluginapi.SupportedVersions {
		if req.Version == v {
			compatible = true
		}
	}
	if !compatible {
		err := fmt.Errorf("requested device plugin version %s is not supported; supported versions are %v", req.Version, pluginapi.SupportedVersions)
		log.Error(err, "Bad registration request from device plugin")
		return &pluginapi.Empty{}, err
	}
	if !isExtendedResourceName(req.ResourceName) {
		err := fmt.Errorf("the ResourceName %q is invalid", req.ResourceName)
		log.Error(err, "Bad registration request from device plugin")
		return &pluginapi.Empty{}, err
	}
	socket := filepath.Join(r.m.opts.PluginDir, req.Endpoint)
	e, err := dialEndpoint(ctx, req.ResourceName, socket)
	if err != nil {
		log.Error(err, "Error connecting to device plugin client")
		return &pluginapi.Empty{}, err
	}
	r.m.mu.Lock()
	if r.m.closed {
		r.m.mu.Unlock()
		e.close()
		return &pluginapi.Empty{}, errors.New("device manager is stopping")
	}
	old := r.m.endpoints[req.ResourceName]
	r.m.endpoints[req.ResourceName] = e
	r.m.streams.Add(1)
	r.m.mu.Unlock()
	if old != nil {
		old.close()
	}
	go func() {
		defer r.m.streams.Done()
		r.m.runEndpoint(logr.NewContext(r.ctx, log), e)
	}()
	log.V(2).Info("Device plugin connected", "socket", socket)
	return &pluginapi.Empty{}, nil
}

// runEndpoint feeds e's ListAndWatch stream into the device sets and marks
// the resource's devices unhealthy when the stream ends and e is still the
// resource's endpoint.
func (m *Manager) runEndpoint(ctx context.Context, e *endpoint) {
	log := logr.FromContextOrDiscard(ctx)
	err := e.listAndWatch(ctx, func(devs []*pluginapi.Device) { m.updateDevices(log, e, devs) })
	log.Info("Device plugin's ListAndWatch ended", "err", err)
	e.close()
	m.mu.Lock()
	if m.endpoints[e.resource] != e {
		m.mu.Unlock()
		return
	}
	e.stopped = true
	e.stopTime = m.opts.Clock.Now()
	// As the kubelet's markResourceUnhealthy: every device of the resource
	// turns unhealthy, so capacity stays and allocatable drops to 0.
	h := m.healthy[e.resource]
	if m.unhealthy[e.resource] == nil {
		m.unhealthy[e.resource] = sets.New[string]()
	}
	m.unhealthy[e.resource] = m.unhealthy[e.resource].Union(h)
	m.healthy[e.resource] = sets.New[string]()
	m.mu.Unlock()
	if err := m.writeCheckpoint(); err != nil {
		log.Error(err, "Failed to write the device manager checkpoint")
	}
}

func (m *Manager) updateDevices(log logr.Logger, e *endpoint, devs []*pluginapi.Device) {
	m.mu.Lock()
	if m.endpoints[e.resource] != e {
		m.mu.Unlock()
		return
	}
	healthChanged := m.podsWithHealthChange(e.resource, m.all[e.resource], devs)
	healthy, unhealthy := sets.New[string](), sets.New[string]()
	all := make(map[string]*pluginapi.Device, len(devs))
	for _, d := range devs {
		all[d.ID] = d
		if d.Health == pluginapi.Healthy {
			healthy.Insert(d.ID)
		} else {
			unhealthy.Insert(d.ID)
		}
	}
	m.healthy[e.resource], m.unhealthy[e.resource], m.all[e.resource] = healthy, unhealthy, all
	m.mu.Unlock()
	m.notifyHealth(log, healthChanged)
	if err := m.writeCheckpoint(); err != nil {
		log.Error(err, "Failed to write the device manager checkpoint")
	}
	log.V(2).Info("Processed device updates for resource", "totalCount", len(devs), "healthyCount", healthy.Len())
}

// Capacity returns the device plugin resources' capacity (all devices) and
// allocatable (healthy devices), and the resources that left the node: those
// whose plugin has been gone for longer than EndpointStopGracePeriod, which
// are forgotten here.
func (m *Manager) Capacity() (capacity, allocatable v1.ResourceList, removed []string) {
	capacity, allocatable = v1.ResourceList{}, v1.ResourceList{}
	m.mu.Lock()
	now := m.opts.Clock.Now()
	for res := range m.healthy {
		e := m.endpoints[res]
		if e == nil || (e.stopped && now.Sub(e.stopTime) > EndpointStopGracePeriod) {
			removed = append(removed, res)
			continue
		}
		h, u := int64(m.healthy[res].Len()), int64(m.unhealthy[res].Len())
		capacity[v1.ResourceName(res)] = *resource.NewQuantity(h+u, resource.DecimalSI)
		allocatable[v1.ResourceName(res)] = *resource.NewQuantity(h, resource.DecimalSI)
	}
	for _, res := range removed {
		delete(m.endpoints, res)
		delete(m.healthy, res)
		delete(m.unhealthy, res)
		delete(m.all, res)
	}
	m.mu.Unlock()
	if len(removed) > 0 {
		_ = m.writeCheckpoint()
	}
	return capacity, allocatable, removed
}

// SetNodeStatus is a node status setter (the status package's Setter
// signature): it puts Capacity's resources into the node's capacity and
// allocatable and deletes the removed ones. It must run after the setter
// that computes allocatable from capacity (status.OrderMachineInfo), since
// a device resource's allocatable is its healthy count, not capacity less
// reservations.
func (m *Manager) SetNodeStatus(_ context.Context, node *v1.Node) error {
	capacity, allocatable, removed := m.Capacity()
	if node.Status.Capacity == nil {
		node.Status.Capacity = v1.ResourceList{}
	}
	if node.Status.Allocatable == nil {
		node.Status.Allocatable = v1.ResourceList{}
	}
	for name, q := range capacity {
		node.Status.Capacity[name] = q
	}
	for name, q := range allocatable {
		node.Status.Allocatable[name] = q
	}
	for _, res := range removed {
		delete(node.Status.Capacity, v1.ResourceName(res))
		delete(node.Status.Allocatable, v1.ResourceName(res))
	}
	return nil
}

// writeCheckpoint writes the allocations and the healthy devices.
func (m *Manager) writeCheckpoint() error {
	m.cpMu.Lock()
	defer m.cpMu.Unlock()
	m.mu.Lock()
	registered := make(map[string][]string, len(m.healthy))
	for res, devs := range m.healthy {
		registered[res] = sets.List(devs)
	}
	entries, err := m.pods.checkpointEntries()
	m.mu.Unlock()
	if err != nil {
		return err
	}
	return checkpoint.Write(m.opts.PluginDir, entries, registered)
}

// isExtendedResourceName is the kubelet's v1helper.IsExtendedResourceName:
// a name with a domain outside kubernetes.io, not "requests."-prefixed,
// that stays a qualified name with the quota prefix.
func isExtendedResourceName(name string) bool {
	if !strings.Contains(name, "/") || strings.Contains(name, "kubernetes.io/") || strings.HasPrefix(name, v1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(v1.DefaultResourceRequestsPrefix+name)) == 0
}
