package dra

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpcstats "google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	drapbv1 "k8s.io/kubelet/pkg/apis/dra/v1"
	drapbv1beta1 "k8s.io/kubelet/pkg/apis/dra/v1beta1"
	"k8s.io/utils/clock"
)

// PluginType is the pluginregistration v1 type of a DRA driver's kubelet
// plugin (registerapi.DRAPlugin).
const PluginType = "DRAPlugin"

// SupportedServices are the DRA gRPC services the Manager calls, newest
// first, as a plugin lists them in its registration's supported versions:
// the kubelet v1.37's.
var SupportedServices = []string{drapbv1.DRAPluginService, drapbv1beta1.DRAPluginService}

// plugin is one registered kubelet plugin of a DRA driver.
type plugin struct {
	driver   string
	endpoint string
	service  string
	// healthService is the DRAResourceHealth service watched, "" for none.
	healthService string
	// stopHealth ends the health watch (nil without one).
	stopHealth context.CancelFunc
	timeout    time.Duration
	conn       *grpc.ClientConn
	reg        *registry
	// connected is guarded by registry.mu.
	connected bool
}

// registry keeps the registered plugins by driver name, newest last, and
// wipes the node's ResourceSlices of a driver none of whose plugins is
// connected for wipingDelay, as the kubelet's DRAPluginManager.
type registry struct {
	ctx     context.Context
	m       *Manager
	mu      sync.Mutex
	plugins map[string][]*plugin
	// wipes are the pending ResourceSlice wipes by driver name.
	wipes map[string]clock.Timer
	// watches are the plugins' health watches.
	watches sync.WaitGroup
}

// TagRPC, HandleRPC and TagConn make a plugin a grpc stats.Handler, for
// HandleConn.
func (p *plugin) TagRPC(ctx context.Context, _ *grpcstats.RPCTagInfo) context.Context { return ctx }

// HandleRPC is part of grpc's stats.Handler; nothing to do.
func (p *plugin) HandleRPC(context.Context, grpcstats.RPCStats) {}

// TagConn is part of grpc's stats.Handler.
func (p *plugin) TagConn(ctx context.Context, _ *grpcstats.ConnTagInfo) context.Context { return ctx }

// HandleConn follows the plugin's connection: a driver without a connected
// plugin gets its ResourceSlices wiped after the delay.
func (p *plugin) HandleConn(_ context.Context, s grpcstats.ConnStats) {
	connected := false
	switch s.(type) {
	case *grpcstats.ConnBegin:
		connected = true
	case *grpcstats.ConnEnd:
		// gRPC does not reconnect by itself: ask, so that a restarted
		// plugin is seen. Not from this goroutine (gRPC holds a lock).
		go p.conn.Connect()
	default:
		return
	}
	r := p.reg
	if r.ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.connected != connected {
		r.m.logger(r.ctx).V(2).Info("DRA plugin connection changed", "driverName", p.driver, "endpoint", p.endpoint, "connected", connected)
	}
	p.connected = connected
	r.syncLocked(p.driver)
}

// get returns the plugin to call for driver: the newest connected one, else
// the newest.
func (r *registry) get(driver string) (*plugin, error) {
	if driver == "" {
		return nil, errors.New("DRA driver name is empty")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ps := r.plugins[driver]
	if len(ps) == 0 {
		return nil, fmt.Errorf("DRA driver %s is not registered", driver)
	}
	for i := len(ps) - 1; i >= 0; i-- {
		if ps[i].connected {
			return ps[i], nil
		}
	}
	return ps[len(ps)-1], nil
}

// chooseService returns the newest service of services the Manager speaks.
func chooseService(services []string) (string, error) {
	if len(services) == 0 {
		return "", errors.New("empty list of supported gRPC services (aka supported versions)")
	}
	for _, s := range services {
		if slices.Contains(SupportedServices, s) {
			return s, nil
		}
	}
	return "", fmt.Errorf("none of services supported by the plugin (%q) are supported by the kubelet (%q)", services, SupportedServices)
}

func (r *registry) add(driver, endpoint, service, healthService string, timeout time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, old := range r.plugins[driver] {
		if old.endpoint == endpoint {
			return fmt.Errorf("endpoint %s already registered for DRA driver plugin %s", endpoint, driver)
		}
	}
	p := &plugin{driver: driver, endpoint: endpoint, service: service, healthService: healthService, timeout: timeout, reg: r}
	conn, err := grpc.NewClient("unix:"+endpoint,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(r.m.metrics.interceptor(driver)),
		grpc.WithStatsHandler(p),
	)
	if err != nil {
		return fmt.Errorf("create gRPC connection to DRA driver %s plugin at endpoint %s: %w", driver, endpoint, err)
	}
	p.conn = conn
	if healthService != "" && r.ctx.Err() == nil {
		ctx, cancel := context.WithCancel(r.ctx)
		p.stopHealth = cancel
		r.watches.Go(func() { r.m.watchHealth(ctx, p) })
	}
	// Connect now, so that a plugin that is not there is noticed before a
	// call needs it.
	conn.Connect()
	r.plugins[driver] = append(r.plugins[driver], p)
	r.m.logger(r.ctx).V(3).Info("Registered DRA plugin", "driverName", driver, "endpoint", endpoint, "chosenService", service, "numPlugins", len(r.plugins[driver]))
	r.syncLocked(driver)
	return nil
}

func (r *registry) remove(driver, endpoint string) {
	r.mu.Lock()
	ps := r.plugins[driver]
	i := slices.IndexFunc(ps, func(p *plugin) bool { return p.endpoint == endpoint })
	if i < 0 {
		r.mu.Unlock()
		return
	}
	p := ps[i]
	if len(ps) == 1 {
		delete(r.plugins, driver)
	} else {
		r.plugins[driver] = slices.Delete(ps, i, i+1)
	}
	r.m.logger(r.ctx).V(3).Info("Unregistered DRA plugin", "driverName", driver, "endpoint", endpoint, "numPlugins", len(r.plugins[driver]))
	r.syncLocked(driver)
	r.mu.Unlock()
	if p.stopHealth != nil {
		p.stopHealth()
	}
	// Closed without the lock: closing calls HandleConn.
	if err := p.conn.Close(); err != nil {
		r.m.logger(r.ctx).Error(err, "Closing gRPC connection", "driverName", driver, "endpoint", endpoint)
	}
}

// syncLocked cancels the driver's pending wipe when one of its plugins is
// connected, and schedules one (unless already pending) when none is.
func (r *registry) syncLocked(driver string) {
	usable := slices.ContainsFunc(r.plugins[driver], func(p *plugin) bool { return p.connected })
	if usable {
		if t := r.wipes[driver]; t != nil {
			t.Stop()
			delete(r.wipes, driver)
		}
		return
	}
	if r.m.opts.Client == nil || r.wipes[driver] != nil {
		return
	}
	r.m.logger(r.ctx).V(2).Info("DRA driver has no connected plugin, its ResourceSlices will be deleted", "driverName", driver, "delay", r.m.opts.WipingDelay)
	var t clock.Timer
	t = r.m.opts.Clock.AfterFunc(r.m.opts.WipingDelay, func() {
		r.mu.Lock()
		current := r.wipes[driver] == t
		r.mu.Unlock()
		if current {
			r.m.wipeResourceSlices(r.ctx, driver)
			r.mu.Lock()
			if r.wipes[driver] == t {
				delete(r.wipes, driver)
			}
			r.mu.Unlock()
		}
	})
	r.wipes[driver] = t
}

// closeAll stops the pending wipes and closes every connection.
func (r *registry) closeAll() {
	r.mu.Lock()
	var conns []*grpc.ClientConn
	for d, t := range r.wipes {
		t.Stop()
		delete(r.wipes, d)
	}
	for _, ps := range r.plugins {
		for _, p := range ps {
			conns = append(conns, p.conn)
			if p.stopHealth != nil {
				p.stopHealth()
			}
		}
	}
	r.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	r.watches.Wait()
}

// wipeResourceSlices deletes the node's ResourceSlices, of driver only
// when not empty, retrying with back-off (1 s doubling to 5 min) until it
// succeeds or ctx ends, as the kubelet.
func (m *Manager) wipeResourceSlices(ctx context.Context, driver string) {
	if m.opts.Client == nil {
		return
	}
	logger := m.logger(ctx)
	sel := fields.Set{resourceapi.ResourceSliceSelectorNodeName: m.opts.NodeName}
	if driver != "" {
		sel[resourceapi.ResourceSliceSelectorDriver] = driver
	}
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.2, Cap: 5 * time.Minute, Steps: 100}
	_ = wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		err := m.opts.Client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{},
			metav1.ListOptions{FieldSelector: sel.String()})
		switch {
		case err == nil, apierrors.IsNotFound(err):
			logger.V(3).Info("Deleted ResourceSlices", "fieldSelector", sel.String())
			return true, nil
		case ctx.Err() != nil:
			return false, ctx.Err()
		default:
			logger.V(3).Info("Deleting ResourceSlices failed, retrying", "fieldSelector", sel.String(), "err", err)
			return false, nil
		}
	})
}

// NodePrepareResources calls the plugin's NodePrepareResources with its
// timeout, in the service version it registered with.
func (p *plugin) NodePrepareResources(ctx context.Context, req *drapbv1.NodePrepareResourcesRequest) (*drapbv1.NodePrepareResourcesResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	switch p.service {
	case drapbv1beta1.DRAPluginService:
		return drapbv1beta1.V1Beta1ClientWrapper{DRAPluginClient: drapbv1beta1.NewDRAPluginClient(p.conn)}.NodePrepareResources(ctx, req)
	default:
		return drapbv1.NewDRAPluginClient(p.conn).NodePrepareResources(ctx, req)
	}
}

// NodeUnprepareResources calls the plugin's NodeUnprepareResources.
func (p *plugin) NodeUnprepareResources(ctx context.Context, req *drapbv1.NodeUnprepareResourcesRequest) (*drapbv1.NodeUnprepareResourcesResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	switch p.service {
	case drapbv1beta1.DRAPluginService:
		return drapbv1beta1.V1Beta1ClientWrapper{DRAPluginClient: drapbv1beta1.NewDRAPluginClient(p.conn)}.NodeUnprepareResources(ctx, req)
	default:
		return drapbv1.NewDRAPluginClient(p.conn).NodeUnprepareResources(ctx, req)
	}
}

// ValidatePlugin accepts a DRA plugin that offers a service the Manager
// speaks (pluginmanager.Handler).
func (m *Manager) ValidatePlugin(_ context.Context, driver, endpoint string, services []string) error {
	if _, err := chooseService(services); err != nil {
		return fmt.Errorf("invalid supported gRPC versions of DRA driver plugin %s at endpoint %s: %w", driver, endpoint, err)
	}
	return nil
}

// RegisterPlugin makes the plugin callable for its driver's claims
// (pluginmanager.Handler), and watches its devices' health when it lists
// a DRAResourceHealth service. Plugins register under their driver's name; a
// driver may have several (a rolling update), the newest connected one is
// called. pluginClientTimeout bounds each call (default 45 s, as the
// kubelet's).
func (m *Manager) RegisterPlugin(_ context.Context, driver, endpoint string, services []string, pluginClientTimeout *time.Duration) error {
	service, err := chooseService(services)
	if err != nil {
		return fmt.Errorf("invalid supported gRPC versions of DRA driver plugin %s at endpoint %s: %w", driver, endpoint, err)
	}
	timeout := m.opts.ClientCallTimeout
	if pluginClientTimeout != nil {
		timeout = *pluginClientTimeout
	}
	return m.reg.add(driver, endpoint, service, pickHealthService(services), timeout)
}

// DeRegisterPlugin forgets the plugin (pluginmanager.Handler); when its
// driver is left without a connected plugin for Options.WipingDelay, the
// node's ResourceSlices of the driver are deleted.
func (m *Manager) DeRegisterPlugin(_ context.Context, driver, endpoint string) {
	m.reg.remove(driver, endpoint)
}

// grpcCode is the status code of err as the kubelet's metric labels it.
func grpcCode(err error) string { return status.Code(err).String() }
