package cgroupdriver

import (
	"fmt"
	"path"
	"strings"
)

const (
	// systemdSliceSuffix is the unit suffix of every systemd slice.
	systemdSliceSuffix = ".slice"
	// systemdRootSlice is the systemd name of the root slice.
	systemdRootSlice = "-.slice"
)

// Name is the driver-independent name of a cgroup: the list of its path
// components from the root, e.g. {"kubepods", "burstable", "pod1234-abcd"}.
// The empty Name is the root cgroup.
//
// A valid Name (see Validate) has no empty component, no component "." or
// "..", and no component containing "/", "_" or NUL. "_" is forbidden so that
// the systemd conversion ("-" becomes "_") can always be reversed, exactly as
// in the kubelet. A Name is a value: the methods never modify it, and the
// functions returning a Name return a fresh slice the caller owns.
type Name []string

// rootName is the Name of the root cgroup of the hierarchy.
var rootName = Name{}

// newName returns a new Name made of parent's components followed by
// components. It returns an error naming the offending component when the
// result would not be valid. parent is not modified.
func newName(parent Name, components ...string) (Name, error) {
	n := make(Name, 0, len(parent)+len(components))
	n = append(n, parent...)
	n = append(n, components...)
	if err := n.Validate(); err != nil {
		return nil, err
	}
	return n, nil
}

// Validate returns an error naming the first invalid component of n, or nil
// when n is a valid Name (see Name).
func (n Name) Validate() error {
	for i, c := range n {
		switch {
		case c == "":
			return fmt.Errorf("cgroup name %q: component %d is empty", n.String(), i)
		case c == "." || c == "..":
			return fmt.Errorf("cgroup name %q: component %d is %q", n.String(), i, c)
		case strings.ContainsAny(c, "/_\x00"):
			return fmt.Errorf("cgroup name %q: component %q contains '/', '_' or NUL", n.String(), c)
		}
	}
	return nil
}

// String returns n's components joined with "/", for messages.
func (n Name) String() string {
	return strings.Join(n, "/")
}

// Equal reports whether n and o have the same components.
func (n Name) Equal(o Name) bool {
	if len(n) != len(o) {
		return false
	}
	for i := range n {
		if n[i] != o[i] {
			return false
		}
	}
	return true
}

// Parent returns the Name of n's parent; the parent of the root is the root.
func (n Name) Parent() Name {
	if len(n) == 0 {
		return rootName
	}
	return append(Name{}, n[:len(n)-1]...)
}

// ToCgroupfs returns the cgroupfs form of n, the path below a hierarchy's
// mount point: "/" + the components joined with "/". The root is "/".
func (n Name) ToCgroupfs() string {
	return "/" + strings.Join(n, "/")
}

// ToSystemd returns the systemd form of n as the kubelet builds it: every
// component has "-" replaced by "_", the components are joined with "-" and
// ".slice" is appended, and the slice name is expanded into the path systemd
// places it at, e.g. {"kubepods", "burstable", "pod12-ab"} becomes
// "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_ab.slice".
// The root is "/". The result is only meaningful for a valid n.
func (n Name) ToSystemd() string {
	if len(n) == 0 {
		return "/"
	}
	var b strings.Builder
	prefix := ""
	for _, c := range n {
		prefix += strings.ReplaceAll(c, "-", "_")
		b.WriteString("/")
		b.WriteString(prefix)
		b.WriteString(systemdSliceSuffix)
		prefix += "-"
	}
	return b.String()
}

// SystemdUnit returns the systemd unit name of n, the last element of
// ToSystemd ("kubepods-burstable-pod12_ab.slice"), and "-.slice" for the root.
func (n Name) SystemdUnit() string {
	if len(n) == 0 {
		return systemdRootSlice
	}
	return path.Base(n.ToSystemd())
}

// ParseCgroupfs converts a cgroupfs path (as returned by ToCgroupfs; a
// missing leading "/" and redundant separators are tolerated) back into a
// Name. It is exported for an embedder's Driver that names cgroups as the
// cgroupfs driver does: its Parse inverts its Literal with it. It never fails: the components are whatever the path holds, so call
// Validate before using the result as a cgroup this package creates.
func ParseCgroupfs(p string) Name {
	p = strings.Trim(path.Clean("/"+p), "/")
	if p == "" {
		return rootName
	}
	return Name(strings.Split(p, "/"))
}

// ParseSystemd converts a systemd slice back into a Name (exported, as
// ParseCgroupfs, for an embedder's Driver that names cgroups as the systemd
// driver does). It accepts either
// the expanded path ToSystemd returns ("/kubepods.slice/kubepods-besteffort.slice")
// (the leading "/" may be missing) or the bare unit name
// ("kubepods-besteffort.slice"); "/", "" and "-.slice"
// are the root. It returns an error when s is not a slice, when a path is not
// the expansion of its last element, or when the result is not a valid Name.
func ParseSystemd(s string) (Name, error) {
	if s == "" || s == "/" || s == systemdRootSlice {
		return rootName, nil
	}
	unit := s
	if strings.Contains(s, "/") {
		unit = s[strings.LastIndex(s, "/")+1:]
	}
	base, ok := strings.CutSuffix(unit, systemdSliceSuffix)
	if !ok || base == "" {
		return nil, fmt.Errorf("parse systemd cgroup %q: %q is not a slice unit", s, unit)
	}
	if base == "-" {
		return nil, fmt.Errorf("parse systemd cgroup %q: the root slice cannot have a parent", s)
	}
	parts := strings.Split(base, "-")
	n := make(Name, len(parts))
	for i, p := range parts {
		if p == "" {
			return nil, fmt.Errorf("parse systemd cgroup %q: slice %q has an empty component", s, unit)
		}
		n[i] = strings.ReplaceAll(p, "_", "-")
	}
	if err := n.Validate(); err != nil {
		return nil, fmt.Errorf("parse systemd cgroup %q: %w", s, err)
	}
	if strings.Contains(s, "/") && "/"+strings.TrimPrefix(s, "/") != n.ToSystemd() {
		return nil, fmt.Errorf("parse systemd cgroup %q: not the expansion %q of slice %q", s, n.ToSystemd(), unit)
	}
	return n, nil
}
