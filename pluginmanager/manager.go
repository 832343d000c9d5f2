package pluginmanager

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// The kubelet's timeouts (pluginmanager/operationexecutor) and back-off
// (util/goroutinemap/exponentialbackoff).
const (
	dialTimeout    = 10 * time.Second
	getInfoTimeout = time.Second
	notifyTimeout  = 5 * time.Second

	initialBackoff = 500 * time.Millisecond
	maxBackoff     = 2*time.Minute + 2*time.Second
)

// Options configure a Manager.
type Options struct {
	// Dir is the registration directory, <root-dir>/plugins_registry.
	// Run creates it (0750) when missing. Required.
	Dir string
	// Handlers dispatch plugins by type (pluginregistration v1
	// PluginInfo.Type). A plugin of a type without a handler is told so
	// and not registered.
	Handlers map[string]Handler
	// Registerer, when set, gets the plugin_manager_total_plugins gauge.
	Registerer prometheus.Registerer
}

// Manager watches the registration directory and registers the plugins
// whose sockets appear in it with their type's Handler (see the package
// doc). Build it with New; it is safe for concurrent use.
type Manager struct {
	dir      string
	handlers map[string]Handler

	mu sync.Mutex
	// desired are the sockets on disk, each with the generation of its
	// creation (a socket created again has a new one) and its identity.
	desired map[string]socketState
	gen     uint64
	// actual are the sockets registered, with the generation registered.
	actual map[string]registered
	// busy are the sockets with an operation running.
	busy map[string]bool
	// failed are the sockets whose last registration failed.
	failed map[string]retry

	wake chan struct{}

	// watch returns the directory watch (newWatcher; tests swap it).
	watch func() (watcher, error)
}

type socketState struct {
	gen uint64
	id  socketID
}

type registered struct {
	gen      uint64
	name     string
	endpoint string
	handler  Handler
}

type retry struct {
	gen   uint64
	delay time.Duration
	next  time.Time
}

// New returns a Manager for opts. It does nothing on the node until Run.
func New(opts Options) (*Manager, error) {
	if opts.Dir == "" {
		return nil, errors.New("pluginmanager: Options.Dir is required")
	}
	m := &Manager{
		dir:      opts.Dir,
		handlers: make(map[string]Handler, len(opts.Handlers)),
		desired:  map[string]socketState{},
		actual:   map[string]registered{},
		busy:     map[string]bool{},
		failed:   map[string]retry{},
		wake:     make(chan struct{}, 1),
		watch:    newWatcher,
	}
	for t, h := range opts.Handlers {
		if h == nil {
			return nil, fmt.Errorf("pluginmanager: nil handler for plugin type %q", t)
		}
		m.handlers[t] = h
	}
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(collector{m}); err != nil {
			return nil, fmt.Errorf("pluginmanager: register metrics: %w", err)
		}
	}
	return m, nil
}

// Run creates and watches the registration directory, registers the
// plugins whose sockets are in it, and then keeps registering new ones and
// de-registering removed ones until ctx is done. Operations under way are
// cancelled and waited for before it returns.
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if err := os.MkdirAll(m.dir, 0o750); err != nil {
		return fmt.Errorf("create plugin registration directory %s: %w", m.dir, err)
	}
	w, err := m.watch()
	if err != nil {
		logger.Error(err, "Cannot watch the plugin registration directory; listing it every second instead", "path", m.dir)
		w = newPollWatcher(time.Second)
	}
	events := make(chan fsEvent, 64)
	go w.read(events)
	defer func() {
		_ = w.close()
		for range events {
		}
	}()
	if err := m.scan(ctx, w, m.dir); err != nil {
		return err
	}
	logger.V(2).Info("Watching the plugin registration directory", "path", m.dir)

	var ops sync.WaitGroup
	defer ops.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := m.reconcile(ctx, &ops)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		if !next.IsZero() {
			timer.Reset(time.Until(next))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-m.wake:
		case <-timer.C:
		case ev, ok := <-events:
			if !ok {
				return errors.New("plugin registration directory watch closed")
			}
			m.handle(ctx, w, ev)
		}
	}
}

// fsEvent is what the watcher saw.
type fsEvent struct {
	op   fsOp
	path string
	dir  bool
	err  error
}

type fsOp int

const (
	opCreate fsOp = iota
	opRemove
	// opRescan: events were lost, or there are none (polling); the
	// directory must be scanned again.
	opRescan
)

// watcher is the platform's directory watch.
type watcher interface {
	add(dir string) error
	read(events chan<- fsEvent)
	close() error
}

func (m *Manager) handle(ctx context.Context, w watcher, ev fsEvent) {
	logger := klog.FromContext(ctx)
	switch ev.op {
	case opCreate:
		if strings.HasPrefix(filepath.Base(ev.path), ".") {
			return
		}
		if ev.dir {
			if err := m.scan(ctx, w, ev.path); err != nil {
				logger.Error(err, "Failed to watch a plugin directory", "path", ev.path)
			}
			return
		}
		m.found(ctx, ev.path)
	case opRemove:
		m.mu.Lock()
		for p := range m.desired {
			if p == ev.path || strings.HasPrefix(p, ev.path+string(filepath.Separator)) {
				logger.V(2).Info("Plugin socket removed", "path", p)
				delete(m.desired, p)
			}
		}
		m.mu.Unlock()
	case opRescan:
		if ev.err != nil {
			logger.Error(ev.err, "Reading the plugin registration directory watch failed; scanning it again")
		}
		// Sockets no longer on disk are forgotten; the scan finds the rest,
		// and new identities count as new sockets.
		m.mu.Lock()
		for p := range m.desired {
			if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
				delete(m.desired, p)
			}
		}
		m.mu.Unlock()
		if err := m.scan(ctx, w, m.dir); err != nil {
			logger.Error(err, "Failed to scan the plugin registration directory")
		}
	}
}

// scan watches dir and the directories below it and adds the sockets in
// them to the desired state, as the kubelet's traversePluginDir.
func (m *Manager) scan(ctx context.Context, w watcher, dir string) error {
	if err := w.add(dir); err != nil {
		return err
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return fmt.Errorf("read plugin directory %s: %w", path, err)
			}
			klog.FromContext(ctx).Error(err, "Failed to read a plugin directory entry", "path", path)
			return nil
		}
		if path == dir {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if err := w.add(path); err != nil {
				return err
			}
			return nil
		}
		m.found(ctx, path)
		return nil
	})
}

// found records a socket at path: a new generation when the path was not
// known or its socket has a new identity. A socket seen twice (by the
// scan at start and by the watch's create event, which race) is one
// generation, registered once; a socket created again at a known path was
// forgotten first by its remove event, or has a new identity at a rescan.
func (m *Manager) found(ctx context.Context, path string) {
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() != fs.ModeSocket {
		return
	}
	id := identity(fi)
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.desired[path]; ok && s.id == id {
		return
	}
	m.gen++
	m.desired[path] = socketState{gen: m.gen, id: id}
	klog.FromContext(ctx).V(2).Info("Plugin socket found", "path", path)
}

// reconcile starts the operations that bring the registered plugins in
// line with the sockets on disk, and returns when the next retry is due
// (zero for none).
func (m *Manager) reconcile(ctx context.Context, ops *sync.WaitGroup) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for path, r := range m.actual {
		if s, ok := m.desired[path]; (ok && s.gen == r.gen) || m.busy[path] {
			continue
		}
		m.start(ctx, ops, path, func(ctx context.Context) { m.unregister(ctx, path, r) })
	}
	for path, f := range m.failed {
		if s, ok := m.desired[path]; !ok || s.gen != f.gen {
			delete(m.failed, path)
		}
	}
	var next time.Time
	for path, s := range m.desired {
		if r, ok := m.actual[path]; (ok && r.gen == s.gen) || m.busy[path] {
			continue
		}
		if _, ok := m.actual[path]; ok {
			continue // the old registration goes first
		}
		if f, ok := m.failed[path]; ok && f.next.After(now) {
			if next.IsZero() || f.next.Before(next) {
				next = f.next
			}
			continue
		}
		m.start(ctx, ops, path, func(ctx context.Context) { m.register(ctx, path, s.gen) })
	}
	return next
}

// start runs op for path in a goroutine, marking path busy until it ends;
// m.mu is held.
func (m *Manager) start(ctx context.Context, ops *sync.WaitGroup, path string, op func(context.Context)) {
	m.busy[path] = true
	ops.Add(1)
	go func() {
		defer ops.Done()
		op(ctx)
		m.mu.Lock()
		delete(m.busy, path)
		m.mu.Unlock()
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}()
}

func (m *Manager) unregister(ctx context.Context, path string, r registered) {
	klog.FromContext(ctx).Info("De-registering plugin", "plugin", r.name, "path", path, "endpoint", r.endpoint)
	m.mu.Lock()
	delete(m.actual, path)
	m.mu.Unlock()
	r.handler.DeRegisterPlugin(ctx, r.name, r.endpoint)
}

func (m *Manager) register(ctx context.Context, path string, gen uint64) {
	logger := klog.FromContext(ctx)
	r, err := m.handshake(ctx, path, gen)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		f := m.failed[path]
		if f.gen != gen || f.delay == 0 {
			f = retry{gen: gen, delay: initialBackoff}
		} else if f.delay *= 2; f.delay > maxBackoff {
			f.delay = maxBackoff
		}
		f.next = time.Now().Add(f.delay)
		m.failed[path] = f
		logger.Error(err, "Plugin registration failed", "path", path, "retryIn", f.delay)
		return
	}
	delete(m.failed, path)
	m.actual[path] = r
	logger.Info("Registered plugin", "plugin", r.name, "path", path, "endpoint", r.endpoint)
}

// handshake is the kubelet's registration of the socket at path:
// GetInfo, the handler's ValidatePlugin and RegisterPlugin, and
// NotifyRegistrationStatus with the outcome.
func (m *Manager) handshake(ctx context.Context, path string, gen uint64) (registered, error) {
	conn, err := dial(ctx, path)
	if err != nil {
		return registered{}, fmt.Errorf("RegisterPlugin error -- dial failed at socket %s, err: %w", path, err)
	}
	defer func() { _ = conn.Close() }()
	client := registerapi.NewRegistrationClient(conn)

	infoCtx, cancel := context.WithTimeout(ctx, getInfoTimeout)
	info, err := client.GetInfo(infoCtx, &registerapi.InfoRequest{})
	cancel()
	if err != nil {
		return registered{}, fmt.Errorf("RegisterPlugin error -- failed to get plugin info using RPC GetInfo at socket %s, err: %w", path, err)
	}
	handler, ok := m.handlers[info.Type]
	if !ok {
		return registered{}, notify(ctx, client, false,
			fmt.Sprintf("RegisterPlugin error -- no handler registered for plugin type: %s at socket %s", info.Type, path))
	}
	endpoint := info.Endpoint
	if endpoint == "" {
		endpoint = path
	}
	if err := handler.ValidatePlugin(ctx, info.Name, endpoint, info.SupportedVersions); err != nil {
		return registered{}, notify(ctx, client, false, fmt.Sprintf("RegisterPlugin error -- plugin validation failed with err: %v", err))
	}
	if err := handler.RegisterPlugin(ctx, info.Name, endpoint, info.SupportedVersions, nil); err != nil {
		return registered{}, notify(ctx, client, false, fmt.Sprintf("RegisterPlugin error -- plugin registration failed with err: %v", err))
	}
	if err := notify(ctx, client, true, ""); err != nil {
		if ctx.Err() != nil {
			// Stopping: the plugin stays registered for the next start.
			return registered{}, err
		}
		handler.DeRegisterPlugin(ctx, info.Name, endpoint)
		return registered{}, fmt.Errorf("RegisterPlugin error -- failed to send registration status at socket %s, err: %w", path, err)
	}
	return registered{gen: gen, name: info.Name, endpoint: endpoint, handler: handler}, nil
}

// notify sends the registration status; it returns errStr as an error
// (joined with the call's error when the call failed too).
func notify(ctx context.Context, client registerapi.RegistrationClient, ok bool, errStr string) error {
	ctx, cancel := context.WithTimeout(ctx, notifyTimeout)
	defer cancel()
	_, err := client.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: ok, Error: errStr})
	switch {
	case err != nil && errStr != "":
		return fmt.Errorf("%s: %w", errStr, err)
	case err != nil:
		return err
	case errStr != "":
		return errors.New(errStr)
	}
	return nil
}

// dial connects to the unix socket at path, waiting up to dialTimeout for
// the plugin to listen.
func dial(ctx context.Context, path string) (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix:"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	conn.Connect()
	for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			_ = conn.Close()
			return nil, fmt.Errorf("failed to dial socket %s, err: %w", path, ctx.Err())
		}
	}
	return conn, nil
}

// collector is plugin_manager_total_plugins.
type collector struct{ m *Manager }

var totalPluginsDesc = prometheus.NewDesc("plugin_manager_total_plugins",
	"Number of plugins in Plugin Manager", []string{"socket_path", "state"}, nil)

func (c collector) Describe(ch chan<- *prometheus.Desc) { ch <- totalPluginsDesc }

func (c collector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	for p := range c.m.actual {
		ch <- prometheus.MustNewConstMetric(totalPluginsDesc, prometheus.GaugeValue, 1, p, "actual_state_of_world")
	}
	for p := range c.m.desired {
		ch <- prometheus.MustNewConstMetric(totalPluginsDesc, prometheus.GaugeValue, 1, p, "desired_state_of_world")
	}
}
