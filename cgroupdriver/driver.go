package cgroupdriver

import (
	"context"
	"fmt"
	"path"
)

// Driver names, the values of KubeletConfiguration cgroupDriver.
const (
	// DriverCgroupfs drives the cgroup filesystem directly.
	DriverCgroupfs = "cgroupfs"
	// DriverSystemd asks systemd over D-Bus to create slices.
	DriverSystemd = "systemd"
)

// Driver creates, updates and removes cgroups named by Name. The two
// implementations are the cgroupfs and the systemd driver, built by
// NewDriver; an embedder may supply its own (Options.Driver).
//
// Implementations must be safe for concurrent use. Operations on different
// cgroups may run in parallel; callers serialize operations on one cgroup.
// Every method that takes a context returns once the operation is complete
// or failed; none keeps running in the background.
type Driver interface {
	// Name returns the driver's name, DriverCgroupfs or DriverSystemd.
	Name() string
	// Version returns the cgroup version (1 or 2) of the hierarchy,
	// detecting it on first use.
	Version() (int, error)
	// Literal returns the driver's literal form of name: the cgroupfs path
	// for the cgroupfs driver, the expanded slice path for the systemd
	// driver. It is what a container runtime receives as a pod sandbox's
	// cgroup parent. name must be valid.
	Literal(name Name) string
	// Parse is the inverse of Literal; it fails on a literal the driver
	// would never produce.
	Parse(literal string) (Name, error)
	// Create creates the cgroup name, and any missing ancestor, and applies
	// r to it. Creating an existing cgroup only applies r.
	Create(ctx context.Context, name Name, r ResourceConfig) error
	// Update applies r to the existing cgroup name.
	Update(ctx context.Context, name Name, r ResourceConfig) error
	// Destroy removes the cgroup name and every cgroup below it. A missing
	// cgroup is not an error. While processes remain, the removal fails with
	// an error wrapping unix.EBUSY; call again once they are gone.
	Destroy(ctx context.Context, name Name) error
	// Exists reports whether the cgroup name exists with the controllers
	// the driver manages.
	Exists(ctx context.Context, name Name) (bool, error)
	// Children returns the Names of name's direct child cgroups that the
	// driver can parse (others, e.g. a runtime's container scopes under the
	// systemd driver, are skipped), in the order of their directory names,
	// found in any hierarchy. A missing cgroup has no children.
	Children(ctx context.Context, name Name) ([]Name, error)
	// Read returns the values in name's control files; fields whose file
	// does not exist are nil, -1 means unlimited, and on cgroup v2
	// CPUShares is converted back from cpu.weight (lossy).
	Read(ctx context.Context, name Name) (ResourceConfig, error)
	// Pids returns the sorted ids of the processes in name and below it.
	Pids(ctx context.Context, name Name) ([]int, error)
}

// FSOptions configure the cgroup filesystem that both drivers write to.
type FSOptions struct {
	// Root is the directory the cgroup hierarchies are mounted under.
	// Default /sys/fs/cgroup. Tests point it at a directory tree (see
	// the package documentation for the layout of a fake tree).
	Root string
	// Version forces the cgroup version (1 or 2). 0 detects it: the root is
	// v2 when it has a cgroup.controllers file, v1 (including hybrid hosts)
	// otherwise.
	Version int
}

func (o FSOptions) tree() (*tree, error) {
	if o.Root == "" {
		o.Root = defaultCgroupFSRoot
	}
	if o.Version != 0 && o.Version != 1 && o.Version != 2 {
		return nil, fmt.Errorf("cgroup version %d: must be 0 (detect), 1 or 2", o.Version)
	}
	return newTree(o.Root, o.Version), nil
}

// cgroupfsDriver is the cgroupfs Driver.
type cgroupfsDriver struct {
	fs *tree
}

// newCgroupfs returns the cgroupfs Driver over the filesystem o. It
// does not touch the filesystem: the layout is detected on first use.
func newCgroupfs(o FSOptions) (Driver, error) {
	t, err := o.tree()
	if err != nil {
		return nil, err
	}
	return &cgroupfsDriver{fs: t}, nil
}

func (d *cgroupfsDriver) Name() string { return DriverCgroupfs }

func (d *cgroupfsDriver) Version() (int, error) { return d.fs.versionOf() }

func (d *cgroupfsDriver) Literal(name Name) string { return name.ToCgroupfs() }

func (d *cgroupfsDriver) Parse(literal string) (Name, error) {
	n := ParseCgroupfs(literal)
	if err := n.Validate(); err != nil {
		return nil, err
	}
	return n, nil
}

func (d *cgroupfsDriver) Create(_ context.Context, name Name, r ResourceConfig) error {
	if err := name.Validate(); err != nil {
		return err
	}
	if err := d.fs.create(name.ToCgroupfs()); err != nil {
		return err
	}
	return d.fs.set(name.ToCgroupfs(), r)
}

func (d *cgroupfsDriver) Update(_ context.Context, name Name, r ResourceConfig) error {
	if err := name.Validate(); err != nil {
		return err
	}
	return d.fs.set(name.ToCgroupfs(), r)
}

func (d *cgroupfsDriver) Destroy(_ context.Context, name Name) error {
	if err := name.Validate(); err != nil {
		return err
	}
	return d.fs.remove(name.ToCgroupfs())
}

func (d *cgroupfsDriver) Exists(_ context.Context, name Name) (bool, error) {
	if err := name.Validate(); err != nil {
		return false, err
	}
	return d.fs.exists(name.ToCgroupfs())
}

func (d *cgroupfsDriver) Children(_ context.Context, name Name) ([]Name, error) {
	return childNames(d.fs, name, d)
}

func (d *cgroupfsDriver) Read(_ context.Context, name Name) (ResourceConfig, error) {
	if err := name.Validate(); err != nil {
		return ResourceConfig{}, err
	}
	return d.fs.read(name.ToCgroupfs())
}

func (d *cgroupfsDriver) Pids(_ context.Context, name Name) ([]int, error) {
	if err := name.Validate(); err != nil {
		return nil, err
	}
	return d.fs.pids(name.ToCgroupfs())
}

// childNames lists the children of name in t and keeps those d parses into
// a direct child of name.
func childNames(t *tree, name Name, d Driver) ([]Name, error) {
	if err := name.Validate(); err != nil {
		return nil, err
	}
	literal := d.Literal(name)
	entries, err := t.children(literal)
	if err != nil {
		return nil, err
	}
	var out []Name
	for _, e := range entries {
		child, err := d.Parse(path.Join(literal, e))
		if err != nil || len(child) != len(name)+1 || !child.Parent().Equal(name) {
			continue
		}
		out = append(out, child)
	}
	return out, nil
}

// versionOf returns the detected cgroup version.
func (t *tree) versionOf() (int, error) {
	l, err := t.detect()
	if err != nil {
		return 0, err
	}
	return l.version, nil
}
