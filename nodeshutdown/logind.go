package nodeshutdown

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
	"k8s.io/klog/v2"
)

const (
	logindService   = "org.freedesktop.login1"
	logindObject    = dbus.ObjectPath("/org/freedesktop/login1")
	logindInterface = "org.freedesktop.login1.Manager"

	// DefaultLogindConfigDir is where LogindSource writes its
	// InhibitDelayMaxSec override, as the kubelet does.
	DefaultLogindConfigDir = "/etc/systemd/logind.conf.d"
	// logindConfigFile is the kubelet's override file name: an agent that
	// replaces a kubelet replaces its override.
	logindConfigFile = "99-kubelet.conf"
)

// LogindOptions configures a LogindSource.
type LogindOptions struct {
	// InhibitDelay is how long the shutdown must wait for the agent
	// (Manager.PeriodRequested). When logind's InhibitDelayMaxSec is
	// shorter, the source raises it as the kubelet does: it writes
	// InhibitDelayMaxSec to ConfigDir/99-kubelet.conf and has systemd send
	// systemd-logind SIGHUP, then checks logind took it.
	InhibitDelay time.Duration
	// ConfigDir is logind's drop-in directory; default
	// DefaultLogindConfigDir.
	ConfigDir string

	// connect opens the bus; tests replace it.
	connect func() (logindBus, error)
}

// LogindSource takes a systemd-logind "delay" inhibitor lock on shutdown and
// signals a node shutdown when logind sends PrepareForShutdown(true) over
// the D-Bus system bus, releasing the lock once the pods are stopped (the
// kubelet's way); PrepareForShutdown(false) cancels it and the lock is
// taken again.
type LogindSource struct {
	opts LogindOptions
}

// NewLogindSource returns a LogindSource. It does no I/O: the bus is
// dialled by Watch.
func NewLogindSource(opts LogindOptions) *LogindSource {
	if opts.ConfigDir == "" {
		opts.ConfigDir = DefaultLogindConfigDir
	}
	if opts.connect == nil {
		opts.connect = connectSystemBus
	}
	return &LogindSource{opts: opts}
}

// String names the source.
func (s *LogindSource) String() string { return "systemd-logind" }

// LogindAvailable reports whether this machine looks like it runs
// systemd-logind: systemd is the init system (/run/systemd/system exists, as
// sd_booted checks) and the D-Bus system bus socket exists. It does not
// dial the bus.
func LogindAvailable() bool {
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		return false
	}
	if addr := os.Getenv("DBUS_SYSTEM_BUS_ADDRESS"); addr != "" {
		return true
	}
	_, err := os.Stat("/run/dbus/system_bus_socket")
	return err == nil
}

// Watch dials the system bus, makes sure logind delays a shutdown long
// enough, takes the inhibitor lock and handles PrepareForShutdown until ctx
// is done (nil) or the bus fails (an error).
func (s *LogindSource) Watch(ctx context.Context, handle func(context.Context, bool)) error {
	logger := klog.FromContext(ctx)
	bus, err := s.opts.connect()
	if err != nil {
		return fmt.Errorf("connect to the D-Bus system bus: %w", err)
	}
	defer func() { _ = bus.Close() }()
	if err := s.ensureInhibitDelay(ctx, bus); err != nil {
		return err
	}
	lock, err := bus.Inhibit()
	if err != nil {
		return err
	}
	release := func() {
		if lock < 0 {
			return
		}
		if err := syscall.Close(lock); err != nil {
			logger.Error(err, "Unable to release the systemd inhibitor lock")
		}
		lock = -1
	}
	defer release()
	events, err := bus.PrepareForShutdown()
	if err != nil {
		return fmt.Errorf("watch logind's PrepareForShutdown: %w", err)
	}
	logger.Info("Watching systemd-logind for node shutdown", "inhibitDelay", s.opts.InhibitDelay)
	for {
		select {
		case <-ctx.Done():
			return nil
		case shuttingDown, ok := <-events:
			if !ok {
				return errors.New("the D-Bus connection to systemd-logind was closed")
			}
			handle(ctx, shuttingDown)
			if shuttingDown {
				release()
				continue
			}
			if lock < 0 {
				if lock, err = bus.Inhibit(); err != nil {
					return err
				}
			}
		}
	}
}

// ensureInhibitDelay raises logind's InhibitDelayMaxSec to the requested
// delay when it is shorter, as the kubelet does, and fails when logind
// does not take it.
func (s *LogindSource) ensureInhibitDelay(ctx context.Context, bus logindBus) error {
	logger := klog.FromContext(ctx)
	current, err := bus.InhibitDelayMax()
	if err != nil {
		return err
	}
	want := s.opts.InhibitDelay
	if want <= current {
		return nil
	}
	logger.Info("logind's InhibitDelayMaxSec is shorter than the shutdown grace period; overriding it", "current", current, "requested", want)
	if err := os.MkdirAll(s.opts.ConfigDir, 0o755); err != nil {
		return fmt.Errorf("create logind drop-in directory: %w", err)
	}
	conf := fmt.Sprintf("# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=%.0f\n", want.Seconds())
	path := filepath.Join(s.opts.ConfigDir, logindConfigFile)
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return fmt.Errorf("write logind shutdown inhibit override %s: %w", path, err)
	}
	if err := bus.ReloadLogind(); err != nil {
		return err
	}
	// logind reloads asynchronously.
	wait := 100 * time.Millisecond
	const attempts = 5
	for attempt := 1; ; attempt++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		if current, err = bus.InhibitDelayMax(); err != nil {
			return err
		}
		if want <= current {
			return nil
		}
		if attempt == attempts {
			return fmt.Errorf("node shutdown manager was timed out after %d attempts waiting for logind InhibitDelayMaxSec to update to %v (ShutdownGracePeriod), current value is %v", attempt, want, current)
		}
		logger.V(3).Info("InhibitDelayMaxSec still less than requested, retrying", "attempt", attempt, "current", current, "requested", want)
		wait *= 2
	}
}

// logindBus is what LogindSource needs of the system bus.
type logindBus interface {
	// InhibitDelayMax is logind's InhibitDelayMaxUSec.
	InhibitDelayMax() (time.Duration, error)
	// Inhibit takes a delay lock on shutdown and returns its descriptor.
	Inhibit() (int, error)
	// ReloadLogind has systemd send systemd-logind SIGHUP.
	ReloadLogind() error
	// PrepareForShutdown subscribes to logind's signal; the channel is
	// closed when the connection is.
	PrepareForShutdown() (<-chan bool, error)
	Close() error
}

// dbusBus is logindBus on a godbus connection.
type dbusBus struct {
	conn *dbus.Conn
}

func connectSystemBus() (logindBus, error) {
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		return nil, err
	}
	return &dbusBus{conn: conn}, nil
}

func (b *dbusBus) Close() error { return b.conn.Close() }

func (b *dbusBus) InhibitDelayMax() (time.Duration, error) {
	v, err := b.conn.Object(logindService, logindObject).GetProperty(logindInterface + ".InhibitDelayMaxUSec")
	if err != nil {
		return 0, fmt.Errorf("read InhibitDelayMaxUSec from logind: %w", err)
	}
	usec, ok := v.Value().(uint64)
	if !ok {
		return 0, fmt.Errorf("InhibitDelayMaxUSec from logind is a %T, not a uint64", v.Value())
	}
	return time.Duration(usec) * time.Microsecond, nil
}

func (b *dbusBus) Inhibit() (int, error) {
	call := b.conn.Object(logindService, logindObject).Call(logindInterface+".Inhibit", 0,
		"shutdown", "kubelet", "Kubelet needs time to handle node shutdown", "delay")
	if call.Err != nil {
		return -1, fmt.Errorf("create a systemd inhibitor: %w", call.Err)
	}
	var fd dbus.UnixFD
	if err := call.Store(&fd); err != nil {
		return -1, fmt.Errorf("read the systemd inhibitor lock: %w", err)
	}
	return int(fd), nil
}

func (b *dbusBus) ReloadLogind() error {
	call := b.conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1").Call(
		"org.freedesktop.systemd1.Manager.KillUnit", 0, "systemd-logind.service", "all", int32(syscall.SIGHUP))
	if call.Err != nil {
		return fmt.Errorf("reload logind's configuration: %w", call.Err)
	}
	return nil
}

func (b *dbusBus) PrepareForShutdown() (<-chan bool, error) {
	if err := b.conn.AddMatchSignal(dbus.WithMatchInterface(logindInterface), dbus.WithMatchMember("PrepareForShutdown"), dbus.WithMatchObjectPath(logindObject)); err != nil {
		return nil, err
	}
	signals := make(chan *dbus.Signal, 1)
	b.conn.Signal(signals)
	out := make(chan bool, 1)
	go func() {
		defer close(out)
		for sig := range signals {
			if sig == nil || len(sig.Body) == 0 {
				continue
			}
			if v, ok := sig.Body[0].(bool); ok {
				out <- v
			}
		}
	}()
	return out, nil
}
