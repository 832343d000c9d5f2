package csi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	nodeutil "k8s.io/component-helpers/node/util"
	"k8s.io/klog/v2"
)

// The kubelet's names and limits (pkg/volume/csi, csi/nodeinfomanager).
const (
	// AnnotationNodeID is the Node annotation holding a JSON map from each
	// registered driver's name to its node ID.
	AnnotationNodeID = "csi.volume.kubernetes.io/nodeid"
	// csiTimeout bounds NodeGetInfo at registration when the plugin
	// manager gives no timeout.
	csiTimeout = 2 * time.Minute
	// migratedPlugins is the CSINode's migrated-plugins annotation: every
	// in-tree plugin is migrated to CSI in the kubelet v1.37.
	migratedPlugins = "kubernetes.io/aws-ebs,kubernetes.io/azure-disk,kubernetes.io/azure-file,kubernetes.io/cinder," +
		"kubernetes.io/gce-pd,kubernetes.io/portworx-volume,kubernetes.io/vsphere-volume"
)

// updateBackoff is nodeinfomanager's retry of a Node or CSINode update.
var updateBackoff = wait.Backoff{Steps: 4, Duration: 10 * time.Millisecond, Factor: 5.0, Jitter: 0.1}

// DriversOptions configure Drivers.
type DriversOptions struct {
	// NodeName is the node's name, which its CSINode bears. Required.
	NodeName string
	// Client updates the node's CSINode and Node. Nil (a standalone node)
	// keeps the registry on the node only.
	Client kubernetes.Interface
	// Registerer, when set, gets csi_operations_seconds, observed on every
	// call through a NodeClient.
	Registerer prometheus.Registerer
	// Registration, when set, tells when the Node is registered and gives
	// its UID (the CSINode's owner reference): Run waits for it before
	// it creates the CSINode, and the Node is not read from the API server
	// for its UID (the kubelet GETs it, and retries while it is not
	// registered yet); when registering created the Node, Run CREATEs the
	// CSINode without reading it first (AlreadyExists, a CSINode left by
	// an earlier Node of the name, falls back to reading it).
	// status.NodeWatch is one when a status.Reporter runs with it. Nil
	// reads the Node from the API server.
	Registration NodeRegistration
}

// NodeRegistration reports the registration of the node's Node
// (status.NodeWatch implements it).
type NodeRegistration interface {
	// Registered is closed once the Node is registered.
	Registered() <-chan struct{}
	// RegisteredNode returns the Node once it is registered, nil before;
	// it makes no request.
	RegisteredNode() *v1.Node
	// NodeCreated reports whether registering created the Node.
	NodeCreated() bool
}

// Drivers is the registry of the CSI drivers on the node, as the kubelet's
// CSI plugin keeps it: the pluginmanager Handler for plugins of type
// CSIPlugin. Registering a driver calls its NodeGetInfo and publishes the
// answer as the kubelet's nodeinfomanager does: the driver in the node's
// CSINode (node ID, topology keys, allocatable count from
// max_volumes_per_node; the CSINode created owned by the Node when
// missing), the driver's node ID in the Node annotation AnnotationNodeID
// and the topology segments as Node labels. De-registering removes the
// driver from the CSINode and the annotation (the labels stay, as the
// kubelet leaves them). Run creates the node's CSINode at start, as the
// kubelet does whether or not a driver is present.
//
// NodeClient gives the volume plugin a client of a registered driver. All
// methods are safe for concurrent use.
type Drivers struct {
	nodeName     string
	client       kubernetes.Interface
	latency      *prometheus.HistogramVec
	registration NodeRegistration

	mu      sync.RWMutex
	drivers map[string]*driver

	// infoMu serializes the Node and CSINode updates, as nodeinfomanager's
	// lock; nodeUID is the Node's UID once read.
	infoMu  sync.Mutex
	nodeUID types.UID
	// triedCreate is set once Run created the CSINode without reading it
	// first; infoMu guards it.
	triedCreate bool
}

type driver struct {
	endpoint string
	version  *utilversion.Version
	conn     *grpc.ClientConn
}

// NewDrivers returns an empty registry. It does nothing on the node or in
// the cluster until a driver registers or Run starts.
func NewDrivers(opts DriversOptions) (*Drivers, error) {
	if opts.NodeName == "" {
		return nil, errors.New("csi: DriversOptions.NodeName is required")
	}
	d := &Drivers{nodeName: opts.NodeName, client: opts.Client, drivers: map[string]*driver{}, registration: opts.Registration}
	if opts.Registerer != nil {
		d.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Subsystem: "csi",
			Name:      "operations_seconds",
			Help:      "Container Storage Interface operation duration with gRPC error code status total",
			Buckets:   []float64{.1, .25, .5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600},
		}, []string{"driver_name", "method_name", "grpc_status_code", "migrated"})
		if err := opts.Registerer.Register(d.latency); err != nil {
			return nil, fmt.Errorf("csi: register metrics: %w", err)
		}
	}
	return d, nil
}

// NodeClient returns a client of the CSI Node service of the registered
// driver driverName, over a connection shared by every caller and replaced
// when the driver registers again at another endpoint. For a driver not
// registered it returns the kubelet's error, "driver name <name> not found
// in the list of registered CSI drivers".
func (d *Drivers) NodeClient(driverName string) (csipb.NodeClient, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	drv, ok := d.drivers[driverName]
	if !ok {
		return nil, fmt.Errorf("driver name %s not found in the list of registered CSI drivers", driverName)
	}
	return csipb.NewNodeClient(drv.conn), nil
}

// Registered returns the names of the registered drivers, sorted.
func (d *Drivers) Registered() []string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	names := make([]string, 0, len(d.drivers))
	for n := range d.drivers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// ValidatePlugin checks the driver's versions as the kubelet: one must be
// 1.x, and a driver of the same name already registered must support a
// lower one.
func (d *Drivers) ValidatePlugin(ctx context.Context, pluginName, endpoint string, versions []string) error {
	klog.FromContext(ctx).Info("Trying to validate a new CSI Driver", "driver", pluginName, "endpoint", endpoint, "versions", versions)
	if _, err := d.validateVersions("ValidatePlugin", pluginName, versions); err != nil {
		return fmt.Errorf("validation failed for CSI Driver %s at endpoint %s: %w", pluginName, endpoint, err)
	}
	return nil
}

func (d *Drivers) validateVersions(caller, name string, versions []string) (*utilversion.Version, error) {
	if len(versions) == 0 {
		return nil, fmt.Errorf("kubernetes.io/csi: %s for CSI driver %q failed. Plugin returned an empty list for supported versions", caller, name)
	}
	v, err := utilversion.HighestSupportedVersion(versions)
	if err != nil {
		return nil, fmt.Errorf("kubernetes.io/csi: %s for CSI driver %q failed. None of the versions specified %q are supported. err=%v", caller, name, versions, err)
	}
	d.mu.RLock()
	old, ok := d.drivers[name]
	d.mu.RUnlock()
	if ok && !old.version.LessThan(v) {
		return nil, fmt.Errorf("kubernetes.io/csi: %s for CSI driver %q failed. Another driver with the same name is already registered with a higher supported version: %q", caller, name, old.version)
	}
	return v, nil
}

// RegisterPlugin registers the driver at endpoint (a unix socket path,
// optionally unix:// prefixed) and publishes its NodeGetInfo (see
// Drivers). A failure leaves the driver unregistered.
func (d *Drivers) RegisterPlugin(ctx context.Context, pluginName, endpoint string, versions []string, pluginClientTimeout *time.Duration) error {
	logger := klog.FromContext(ctx)
	logger.Info("Register new plugin", "driver", pluginName, "endpoint", endpoint)
	v, err := d.validateVersions("RegisterPlugin", pluginName, versions)
	if err != nil {
		return err
	}
	if err := d.set(pluginName, endpoint, v); err != nil {
		return err
	}
	timeout := csiTimeout
	if pluginClientTimeout != nil {
		timeout = *pluginClientTimeout
	}
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client, err := d.NodeClient(pluginName)
	if err == nil {
		var info *csipb.NodeGetInfoResponse
		if info, err = client.NodeGetInfo(callCtx, &csipb.NodeGetInfoRequest{}); err == nil {
			var topology map[string]string
			if t := info.GetAccessibleTopology(); t != nil {
				topology = t.GetSegments()
			}
			err = d.install(ctx, pluginName, info.GetNodeId(), info.GetMaxVolumesPerNode(), topology)
		}
	}
	if err != nil {
		d.remove(pluginName)
		return fmt.Errorf("register CSI driver %s at %s: %w", pluginName, endpoint, err)
	}
	return nil
}

// DeRegisterPlugin forgets the driver and removes it from the node's
// CSINode and annotation. A de-registration of an endpoint the driver no
// longer registers at (it registered again elsewhere) is ignored.
func (d *Drivers) DeRegisterPlugin(ctx context.Context, pluginName, endpoint string) {
	logger := klog.FromContext(ctx)
	logger.Info("DeRegisterPlugin request for plugin", "driver", pluginName, "endpoint", endpoint)
	d.mu.RLock()
	drv, ok := d.drivers[pluginName]
	d.mu.RUnlock()
	if ok && drv.endpoint != endpoint {
		logger.Info("CSI driver registered again at another endpoint; keeping it", "driver", pluginName, "endpoint", drv.endpoint)
		return
	}
	d.remove(pluginName)
	if err := d.uninstall(ctx, pluginName); err != nil {
		logger.Error(err, "Failed to remove the CSI driver from the node's objects", "driver", pluginName)
	}
}

// set records the driver, connecting to its endpoint unless it is
// registered at the same one already.
func (d *Drivers) set(name, endpoint string, v *utilversion.Version) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := d.drivers[name]; ok && old.endpoint == endpoint {
		old.version = v
		return nil
	}
	conn, err := d.dial(name, endpoint)
	if err != nil {
		return err
	}
	if old, ok := d.drivers[name]; ok {
		_ = old.conn.Close()
	}
	d.drivers[name] = &driver{endpoint: endpoint, version: v, conn: conn}
	return nil
}

func (d *Drivers) remove(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if drv, ok := d.drivers[name]; ok {
		_ = drv.conn.Close()
		delete(d.drivers, name)
	}
}

// dial returns a connection to the driver's unix socket; it connects
// lazily and reconnects by itself.
func (d *Drivers) dial(name, endpoint string) (*grpc.ClientConn, error) {
	path := strings.TrimPrefix(endpoint, "unix://")
	opts := []grpc.DialOption{
		grpc.WithAuthority("localhost"),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}),
	}
	if d.latency != nil {
		opts = append(opts, grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
			cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
			start := time.Now()
			err := invoker(ctx, method, req, reply, cc, callOpts...)
			d.latency.WithLabelValues(name, method, grpcCode(err), "false").Observe(time.Since(start).Seconds())
			return err
		}))
	}
	// The target is only a name: the dialer above connects to the socket.
	conn, err := grpc.NewClient("passthrough:///"+path, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to CSI driver %s at %s: %w", name, endpoint, err)
	}
	return conn, nil
}

// grpcCode is the kubelet's grpc_status_code label of err.
func grpcCode(err error) string {
	if err == nil {
		return "OK"
	}
	if s, ok := status.FromError(err); ok {
		return s.Code().String()
	}
	return "unknown-non-grpc"
}

// Run creates the node's CSINode (owned by its Node, with the
// migrated-plugins annotation) as the kubelet does at start, retrying
// with back-off (30 ms growing to 30 s apart) until it is done, and
// returns; or returns nil when ctx ends first. Without a Client it returns
// at once. Unlike the kubelet, which exits after about 140 s of failures,
// it never gives up: a node that cannot write its CSINode (its Node not
// registered yet, an API server away or refusing) keeps its pods running
// and says why in an error line every 30 s.
func (d *Drivers) Run(ctx context.Context) error {
	if d.client == nil {
		return nil
	}
	logger := klog.FromContext(ctx)
	if d.registration != nil {
		select {
		case <-ctx.Done():
			return nil
		case <-d.registration.Registered():
		}
	}
	const maxDelay = 30 * time.Second
	delay := 30 * time.Millisecond
	for {
		err := d.initializeCSINode(ctx)
		if err == nil {
			return nil
		}
		if delay < maxDelay {
			logger.V(2).Info("Failed to initialize CSINode, will retry", "node", d.nodeName, "err", err)
		} else {
			logger.Error(err, "Failed to initialize CSINode, will retry", "node", d.nodeName, "retryIn", maxDelay)
		}
		t := time.NewTimer(wait.Jitter(delay, 0.1))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		delay = min(delay*8, maxDelay)
	}
}

// initializeCSINode is nodeinfomanager's tryInitializeCSINodeWithAnnotation.
func (d *Drivers) initializeCSINode(ctx context.Context) error {
	d.infoMu.Lock()
	defer d.infoMu.Unlock()
	if err := d.readNodeUID(ctx); err != nil {
		return err
	}
	if d.registration != nil && d.registration.NodeCreated() && !d.triedCreate {
		// Once: a retry after an error reads the CSINode first.
		d.triedCreate = true
		_, err := d.createCSINode(ctx)
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	csiNode, err := d.client.StorageV1().CSINodes().Get(ctx, d.nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = d.createCSINode(ctx)
		return err
	} else if err != nil {
		return err
	}
	if err := d.ensureOwned(ctx, csiNode); err != nil {
		return err
	}
	if setMigrationAnnotation(csiNode) {
		_, err = d.client.StorageV1().CSINodes().Update(ctx, csiNode, metav1.UpdateOptions{})
	}
	return err
}

// readNodeUID sets nodeUID from the registered Node or, without a
// Registration or before the Node is registered, from the API server;
// infoMu is held.
func (d *Drivers) readNodeUID(ctx context.Context) error {
	if d.registration != nil {
		if node := d.registration.RegisteredNode(); node != nil {
			d.nodeUID = node.UID
			return nil
		}
	}
	node, err := d.client.CoreV1().Nodes().Get(ctx, d.nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	d.nodeUID = node.UID
	return nil
}

// install is nodeinfomanager's InstallCSIDriver: the Node first (node ID
// annotation, topology labels), then the CSINode, each retried.
func (d *Drivers) install(ctx context.Context, name, nodeID string, maxVolumes int64, topology map[string]string) error {
	if nodeID == "" {
		return errors.New("error adding CSI driver node info: driverNodeID must not be empty")
	}
	if d.client == nil {
		return nil
	}
	if err := d.retry(ctx, "updating node", func() error {
		return d.updateNode(ctx, addNodeID(name, nodeID), addTopologyLabels(topology))
	}); err != nil {
		return fmt.Errorf("error updating Node object with CSI driver node info: %w", err)
	}
	if err := d.retry(ctx, "updating CSINode", func() error {
		return d.installInCSINode(ctx, name, nodeID, maxVolumes, topology)
	}); err != nil {
		return fmt.Errorf("error updating CSINode object with CSI driver node info: %w", err)
	}
	return nil
}

// uninstall is nodeinfomanager's UninstallCSIDriver.
func (d *Drivers) uninstall(ctx context.Context, name string) error {
	if d.client == nil {
		return nil
	}
	if err := d.retry(ctx, "updating CSINode", func() error { return d.uninstallFromCSINode(ctx, name) }); err != nil {
		return fmt.Errorf("error uninstalling CSI driver from CSINode object %w", err)
	}
	if err := d.retry(ctx, "updating node", func() error { return d.updateNode(ctx, removeNodeID(name)) }); err != nil {
		return fmt.Errorf("error removing CSI driver node info from Node object %w", err)
	}
	return nil
}

func (d *Drivers) retry(ctx context.Context, what string, f func() error) error {
	var errs []error
	err := wait.ExponentialBackoffWithContext(ctx, updateBackoff, func(context.Context) (bool, error) {
		if err := f(); err != nil {
			errs = append(errs, err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("error %s: %v; caused by: %w", what, err, utilerrors.NewAggregate(errs))
	}
	return nil
}

// nodeUpdate changes node in place and reports whether it did.
type nodeUpdate func(node *v1.Node) (bool, error)

// updateNode applies updates to the Node and patches it (nodes/status, as
// the kubelet's PatchNodeStatus, which carries metadata too).
func (d *Drivers) updateNode(ctx context.Context, updates ...nodeUpdate) error {
	d.infoMu.Lock()
	defer d.infoMu.Unlock()
	orig, err := d.client.CoreV1().Nodes().Get(ctx, d.nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	node := orig.DeepCopy()
	changed := false
	for _, u := range updates {
		c, err := u(node)
		if err != nil {
			return err
		}
		changed = changed || c
	}
	if !changed {
		return nil
	}
	_, _, err = nodeutil.PatchNodeStatus(d.client.CoreV1(), types.NodeName(d.nodeName), orig, node)
	return err
}

func nodeIDs(node *v1.Node) (map[string]string, error) {
	m := map[string]string{}
	if s := node.Annotations[AnnotationNodeID]; s != "" {
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			return nil, fmt.Errorf("failed to parse node's %q annotation value (%q) err=%v", AnnotationNodeID, s, err)
		}
	}
	return m, nil
}

func addNodeID(name, nodeID string) nodeUpdate {
	return func(node *v1.Node) (bool, error) {
		m, err := nodeIDs(node)
		if err != nil {
			return false, err
		}
		if m[name] == nodeID {
			return false, nil
		}
		m[name] = nodeID
		b, err := json.Marshal(m)
		if err != nil {
			return false, err
		}
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		node.Annotations[AnnotationNodeID] = string(b)
		return true, nil
	}
}

func removeNodeID(name string) nodeUpdate {
	return func(node *v1.Node) (bool, error) {
		if node.Annotations[AnnotationNodeID] == "" {
			return false, nil
		}
		m, err := nodeIDs(node)
		if err != nil {
			return false, err
		}
		if _, ok := m[name]; !ok {
			return false, nil
		}
		delete(m, name)
		if len(m) == 0 {
			delete(node.Annotations, AnnotationNodeID)
			return true, nil
		}
		b, err := json.Marshal(m)
		if err != nil {
			return false, err
		}
		node.Annotations[AnnotationNodeID] = string(b)
		return true, nil
	}
}

func addTopologyLabels(topology map[string]string) nodeUpdate {
	return func(node *v1.Node) (bool, error) {
		changed := false
		for k, v := range topology {
			if cur, ok := node.Labels[k]; ok && cur != v {
				return false, fmt.Errorf("detected topology value collision: driver reported %q:%q but existing label is %q:%q", k, v, k, cur)
			} else if !ok {
				changed = true
			}
		}
		if !changed {
			return false, nil
		}
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		for k, v := range topology {
			node.Labels[k] = v
		}
		return true, nil
	}
}

// installInCSINode is nodeinfomanager's tryUpdateCSINode.
func (d *Drivers) installInCSINode(ctx context.Context, name, nodeID string, maxVolumes int64, topology map[string]string) error {
	d.infoMu.Lock()
	defer d.infoMu.Unlock()
	if d.nodeUID == "" {
		if err := d.readNodeUID(ctx); err != nil {
			return err
		}
	}
	csiNode, err := d.client.StorageV1().CSINodes().Get(ctx, d.nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		csiNode, err = d.createCSINode(ctx)
	}
	if err != nil {
		return err
	}
	if err := d.ensureOwned(ctx, csiNode); err != nil {
		return err
	}
	keys := sets.KeySet(topology)
	modified := true
	drivers := make([]storagev1.CSINodeDriver, 0, len(csiNode.Spec.Drivers)+1)
	for _, drv := range csiNode.Spec.Drivers {
		if drv.Name != name {
			drivers = append(drivers, drv)
			continue
		}
		if drv.NodeID == nodeID && sets.New(drv.TopologyKeys...).Equal(keys) && sameCount(drv, maxVolumes) {
			modified = false
		}
	}
	annotated := setMigrationAnnotation(csiNode)
	if !modified && !annotated {
		return nil
	}
	spec := storagev1.CSINodeDriver{Name: name, NodeID: nodeID, TopologyKeys: sets.List(keys)}
	switch {
	case maxVolumes > 0:
		n := int32(min(maxVolumes, math.MaxInt32))
		spec.Allocatable = &storagev1.VolumeNodeResources{Count: &n}
	case maxVolumes < 0:
		klog.FromContext(ctx).Error(nil, "Invalid attach limit value cannot be added to CSINode object", "limit", maxVolumes, "driver", name)
	}
	csiNode.Spec.Drivers = append(drivers, spec)
	_, err = d.client.StorageV1().CSINodes().Update(ctx, csiNode, metav1.UpdateOptions{})
	return err
}

func sameCount(drv storagev1.CSINodeDriver, maxVolumes int64) bool {
	if maxVolumes == 0 {
		return drv.Allocatable == nil || drv.Allocatable.Count == nil
	}
	return drv.Allocatable != nil && drv.Allocatable.Count != nil && int64(*drv.Allocatable.Count) == maxVolumes
}

// uninstallFromCSINode is nodeinfomanager's tryUninstallDriverFromCSINode.
func (d *Drivers) uninstallFromCSINode(ctx context.Context, name string) error {
	d.infoMu.Lock()
	defer d.infoMu.Unlock()
	csiNode, err := d.client.StorageV1().CSINodes().Get(ctx, d.nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	drivers := slices.DeleteFunc(slices.Clone(csiNode.Spec.Drivers), func(drv storagev1.CSINodeDriver) bool { return drv.Name == name })
	if len(drivers) == len(csiNode.Spec.Drivers) {
		return nil
	}
	csiNode.Spec.Drivers = drivers
	_, err = d.client.StorageV1().CSINodes().Update(ctx, csiNode, metav1.UpdateOptions{})
	return err
}

// createCSINode creates the node's empty CSINode owned by its Node;
// infoMu is held and nodeUID known.
func (d *Drivers) createCSINode(ctx context.Context) (*storagev1.CSINode, error) {
	csiNode := &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{
			Name: d.nodeName,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1",
				Kind:       "Node",
				Name:       d.nodeName,
				UID:        d.nodeUID,
			}},
		},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{}},
	}
	setMigrationAnnotation(csiNode)
	return d.client.StorageV1().CSINodes().Create(ctx, csiNode, metav1.CreateOptions{})
}

// ensureOwned deletes a CSINode left by an earlier Node of the same name
// (another UID) and says so; the caller's retry creates a new one.
func (d *Drivers) ensureOwned(ctx context.Context, csiNode *storagev1.CSINode) error {
	var owner types.UID
	for _, ref := range csiNode.OwnerReferences {
		if ref.Kind != "Node" {
			continue
		}
		owner = ref.UID
		if ref.Name == d.nodeName && ref.UID == d.nodeUID {
			return nil
		}
	}
	klog.FromContext(ctx).V(2).Info("Existing CSINode is owned by a different node, cleaning up", "csiNode", csiNode.Name, "oldNodeID", owner, "newNodeID", d.nodeUID)
	if err := d.client.StorageV1().CSINodes().Delete(ctx, csiNode.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("error deleting existing CSINode %q: %w", csiNode.Name, err)
	}
	return fmt.Errorf("CSINode %q was owned by different node (oldNodeID=%q, newNodeID=%q), deleted it", csiNode.Name, owner, d.nodeUID)
}

// setMigrationAnnotation sets the CSINode's migrated-plugins annotation
// and reports whether it changed.
func setMigrationAnnotation(csiNode *storagev1.CSINode) bool {
	old := csiNode.Annotations[v1.MigratedPluginsAnnotationKey]
	if sets.New(strings.Split(old, ",")...).Equal(sets.New(strings.Split(migratedPlugins, ",")...)) {
		return false
	}
	if csiNode.Annotations == nil {
		csiNode.Annotations = map[string]string{}
	}
	csiNode.Annotations[v1.MigratedPluginsAnnotationKey] = migratedPlugins
	return true
}
