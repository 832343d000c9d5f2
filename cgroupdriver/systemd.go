package cgroupdriver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
)

// SystemdConn is the part of systemd's D-Bus API the systemd driver uses.
// *dbus.Conn of github.com/coreos/go-systemd/v22/dbus implements it; tests
// use a fake. Implementations must be safe for concurrent use.
type SystemdConn interface {
	// StartTransientUnitContext starts a transient unit; the job's result
	// ("done" on success) is sent on ch.
	StartTransientUnitContext(ctx context.Context, name, mode string, properties []sddbus.Property, ch chan<- string) (int, error)
	// StopUnitContext stops a unit; the job's result is sent on ch.
	StopUnitContext(ctx context.Context, name, mode string, ch chan<- string) (int, error)
	// SetUnitPropertiesContext changes properties of a running unit.
	SetUnitPropertiesContext(ctx context.Context, name string, runtime bool, properties ...sddbus.Property) error
	// ResetFailedUnitContext clears a unit's failed state.
	ResetFailedUnitContext(ctx context.Context, name string) error
	// GetManagerProperty returns a manager property in GVariant text form.
	GetManagerProperty(prop string) (string, error)
	// Close releases the connection.
	Close()
}

// dialSystemd connects to systemd over the system bus, or directly to its
// private socket when the bus is unavailable and the caller is root.
func dialSystemd(ctx context.Context) (SystemdConn, error) {
	return sddbus.NewWithContext(ctx)
}

// D-Bus error names systemd returns.
const (
	dbusErrUnitExists = "org.freedesktop.systemd1.UnitExists"
	dbusErrNoSuchUnit = "org.freedesktop.systemd1.NoSuchUnit"
)

// systemdCPUQuotaPeriodVersion is the first systemd with CPUQuotaPeriodUSec.
const systemdCPUQuotaPeriodVersion = 242

// defaultSystemdJobTimeout bounds the wait for a start or stop job.
const defaultSystemdJobTimeout = 30 * time.Second

// systemdOptions configure newSystemd.
type systemdOptions struct {
	// FS is the cgroup filesystem the slices appear in.
	FS FSOptions
	// Dial opens the D-Bus connection, on first use and again after the
	// connection was closed. Default dialSystemd.
	Dial func(ctx context.Context) (SystemdConn, error)
	// JobTimeout bounds the wait for a start or stop job. Default 30 s.
	JobTimeout time.Duration
}

// systemdDriver is the systemd Driver: it asks systemd for one transient
// slice unit per cgroup, with the resource values as unit properties, and
// then writes the same values to the cgroup files (as runc's systemd
// manager, and so the kubelet, do).
type systemdDriver struct {
	fs         *tree
	dial       func(ctx context.Context) (SystemdConn, error)
	jobTimeout time.Duration

	mu      sync.Mutex
	conn    SystemdConn
	version int // systemd's version; 0 until read, -1 unreadable
}

// newSystemd returns the systemd Driver. It neither connects to D-Bus
// nor touches the filesystem: both happen on first use.
func newSystemd(o systemdOptions) (Driver, error) {
	t, err := o.FS.tree()
	if err != nil {
		return nil, err
	}
	if o.Dial == nil {
		o.Dial = dialSystemd
	}
	if o.JobTimeout <= 0 {
		o.JobTimeout = defaultSystemdJobTimeout
	}
	return &systemdDriver{fs: t, dial: o.Dial, jobTimeout: o.JobTimeout}, nil
}

func (d *systemdDriver) Name() string { return DriverSystemd }

func (d *systemdDriver) Version() (int, error) { return d.fs.versionOf() }

func (d *systemdDriver) Literal(name Name) string { return name.ToSystemd() }

func (d *systemdDriver) Parse(literal string) (Name, error) { return ParseSystemd(literal) }

// Create starts the slice unit (an existing unit is kept), creates the
// cgroup directories systemd does not manage (cpuset on v1, for example)
// and applies r.
func (d *systemdDriver) Create(ctx context.Context, name Name, r ResourceConfig) error {
	if err := validateNonRoot(name); err != nil {
		return err
	}
	version, err := d.fs.versionOf()
	if err != nil {
		return err
	}
	unit := name.SystemdUnit()
	ioAccounting := "IOAccounting"
	if version == 1 {
		ioAccounting = "BlockIOAccounting"
	}
	props := []sddbus.Property{
		sddbus.PropDescription("libcontainer container " + unit),
		sddbus.PropWants(name.Parent().SystemdUnit()),
		newProp("MemoryAccounting", true),
		newProp("CPUAccounting", true),
		newProp(ioAccounting, true),
		newProp("TasksAccounting", true),
		newProp("DefaultDependencies", false),
	}
	err = d.withConn(ctx, func(c SystemdConn) error {
		ch := make(chan string, 1)
		if _, err := c.StartTransientUnitContext(ctx, unit, "replace", props, ch); err != nil {
			return err
		}
		return d.waitJob(ctx, ch)
	})
	if err != nil && !isDBusError(err, dbusErrUnitExists) {
		return fmt.Errorf("start systemd unit %s: %w", unit, err)
	}
	if err := d.fs.create(name.ToSystemd()); err != nil {
		return err
	}
	return d.Update(ctx, name, r)
}

// Update sets r as unit properties and writes it to the cgroup files.
func (d *systemdDriver) Update(ctx context.Context, name Name, r ResourceConfig) error {
	if err := validateNonRoot(name); err != nil {
		return err
	}
	version, err := d.fs.versionOf()
	if err != nil {
		return err
	}
	unit := name.SystemdUnit()
	sdVersion := d.systemdVersion(ctx)
	props, r := systemdProperties(version, sdVersion, r)
	if len(props) > 0 {
		err := d.withConn(ctx, func(c SystemdConn) error {
			return c.SetUnitPropertiesContext(ctx, unit, true, props...)
		})
		if err != nil {
			return fmt.Errorf("set properties of systemd unit %s: %w", unit, err)
		}
	}
	return d.fs.set(name.ToSystemd(), r)
}

// Destroy stops the slice unit (a unit systemd does not know is fine),
// resets its failed state and removes what is left of the cgroup.
func (d *systemdDriver) Destroy(ctx context.Context, name Name) error {
	if err := validateNonRoot(name); err != nil {
		return err
	}
	unit := name.SystemdUnit()
	err := d.withConn(ctx, func(c SystemdConn) error {
		ch := make(chan string, 1)
		if _, err := c.StopUnitContext(ctx, unit, "replace", ch); err != nil {
			return err
		}
		return d.waitJob(ctx, ch)
	})
	if err != nil && !isDBusError(err, dbusErrNoSuchUnit) {
		return fmt.Errorf("stop systemd unit %s: %w", unit, err)
	}
	// A unit whose job failed stays loaded in "failed" state until reset; a
	// unit that is already gone makes this fail, which is fine.
	_ = d.withConn(ctx, func(c SystemdConn) error { return c.ResetFailedUnitContext(ctx, unit) })
	return d.fs.remove(name.ToSystemd())
}

func (d *systemdDriver) Exists(_ context.Context, name Name) (bool, error) {
	if err := name.Validate(); err != nil {
		return false, err
	}
	return d.fs.exists(name.ToSystemd())
}

func (d *systemdDriver) Children(_ context.Context, name Name) ([]Name, error) {
	return childNames(d.fs, name, d)
}

func (d *systemdDriver) Read(_ context.Context, name Name) (ResourceConfig, error) {
	if err := name.Validate(); err != nil {
		return ResourceConfig{}, err
	}
	return d.fs.read(name.ToSystemd())
}

func (d *systemdDriver) Pids(_ context.Context, name Name) ([]int, error) {
	if err := name.Validate(); err != nil {
		return nil, err
	}
	return d.fs.pids(name.ToSystemd())
}

// waitJob waits for a job's result on ch.
func (d *systemdDriver) waitJob(ctx context.Context, ch <-chan string) error {
	timer := time.NewTimer(d.jobTimeout)
	defer timer.Stop()
	select {
	case res := <-ch:
		if res != "done" {
			return fmt.Errorf("systemd job result %q", res)
		}
		return nil
	case <-timer.C:
		return fmt.Errorf("systemd job did not finish within %v", d.jobTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// withConn runs fn on the connection, dialing it first if needed, and once
// more on a fresh connection when the old one turns out to be closed.
func (d *systemdDriver) withConn(ctx context.Context, fn func(SystemdConn) error) error {
	for attempt := 0; ; attempt++ {
		conn, err := d.connect(ctx)
		if err != nil {
			return err
		}
		err = fn(conn)
		if attempt == 0 && errors.Is(err, godbus.ErrClosed) {
			d.drop(conn)
			continue
		}
		return err
	}
}

func (d *systemdDriver) connect(ctx context.Context) (SystemdConn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn != nil {
		return d.conn, nil
	}
	conn, err := d.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to systemd over D-Bus: %w", err)
	}
	d.conn = conn
	return conn, nil
}

// drop forgets conn (if still current) so the next call dials again.
func (d *systemdDriver) drop(conn SystemdConn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn == conn {
		d.conn.Close()
		d.conn = nil
	}
}

// systemdVersion returns systemd's version, reading it once; -1 when it
// could not be read (as runc, the failure is not retried:
// CPUQuotaPeriodUSec is then left out, and the period is still written to
// the cgroup files).
func (d *systemdDriver) systemdVersion(ctx context.Context) int {
	d.mu.Lock()
	v := d.version
	d.mu.Unlock()
	if v != 0 {
		return v
	}
	var raw string
	err := d.withConn(ctx, func(c SystemdConn) error {
		var err error
		raw, err = c.GetManagerProperty("Version")
		return err
	})
	v = -1
	if err == nil {
		v = parseSystemdVersion(raw)
	}
	d.mu.Lock()
	d.version = v
	d.mu.Unlock()
	return v
}

// parseSystemdVersion extracts the leading number of a systemd version
// property such as `"252.22-1~deb12u1"` or `"v245.4-1.fc32"`; -1 if none.
func parseSystemdVersion(raw string) int {
	s := strings.TrimLeft(raw, `"v`)
	end := 0
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	v, err := strconv.Atoi(s[:end])
	if err != nil {
		return -1
	}
	return v
}

// systemdProperties converts r to unit properties for a cgroup v1 or v2
// hierarchy and systemd version sdVersion. systemd keeps the CPU quota as a
// whole percentage of a CPU, so a quota is rounded up to the next 10ms per
// second; the returned ResourceConfig carries the rounded quota, to be
// written to the cgroup files so that both agree (as runc does).
func systemdProperties(version, sdVersion int, r ResourceConfig) ([]sddbus.Property, ResourceConfig) {
	var props []sddbus.Property
	if r.CPUShares != nil {
		if version == 1 {
			props = append(props, newProp("CPUShares", *r.CPUShares))
		} else {
			props = append(props, newProp("CPUWeight", cpuSharesToWeight(*r.CPUShares)))
		}
	}
	var period uint64
	if r.CPUPeriod != nil {
		period = *r.CPUPeriod
	}
	if period != 0 && sdVersion >= systemdCPUQuotaPeriodVersion {
		props = append(props, newProp("CPUQuotaPeriodUSec", period))
	}
	var quota int64
	if r.CPUQuota != nil {
		quota = *r.CPUQuota
	}
	if quota != 0 || period != 0 {
		perSec := uint64(math.MaxUint64) // USEC_INFINITY
		if quota > 0 {
			p := period
			if p == 0 {
				p = defaultCPUPeriod
			}
			perSec = uint64(quota) * 1000000 / p
			if perSec%10000 != 0 {
				perSec = (perSec/10000 + 1) * 10000
				rounded := int64(perSec * p / 1000000)
				r.CPUQuota = &rounded
			}
		}
		props = append(props, newProp("CPUQuotaPerSecUSec", perSec))
	}
	if r.Memory != nil && *r.Memory != 0 {
		name := "MemoryMax"
		if version == 1 {
			name = "MemoryLimit"
		}
		props = append(props, newProp(name, unitLimit(*r.Memory)))
	}
	if r.PidsLimit != nil {
		tasks := unitLimit(*r.PidsLimit)
		if *r.PidsLimit == 0 {
			tasks = 1 // systemd refuses 0
		}
		props = append(props, newProp("TasksMax", tasks))
	}
	return props, r
}

// unitLimit maps a limit to a systemd unit value: negative is infinity.
func unitLimit(v int64) uint64 {
	if v < 0 {
		return math.MaxUint64
	}
	return uint64(v)
}

func newProp(name string, value any) sddbus.Property {
	return sddbus.Property{Name: name, Value: godbus.MakeVariant(value)}
}

// isDBusError reports whether err is the D-Bus error called name.
func isDBusError(err error, name string) bool {
	var derr godbus.Error
	if errors.As(err, &derr) {
		return derr.Name == name
	}
	var pderr *godbus.Error
	return errors.As(err, &pderr) && pderr.Name == name
}

// validateNonRoot refuses the root slice, which systemd owns.
func validateNonRoot(name Name) error {
	if err := name.Validate(); err != nil {
		return err
	}
	if len(name) == 0 {
		return errors.New("the root slice -.slice belongs to systemd")
	}
	return nil
}
