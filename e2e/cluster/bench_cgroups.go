package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CreateCgroup creates the cgroup /name in every mounted cgroup hierarchy,
// for a node agent's cgroupRoot, so that agents running at the same time
// (nodekit's, the kubelet, other tests') never share a kubepods cgroup. In
// a cgroup v1 cpuset hierarchy the new cgroup gets its parent's cpus and
// mems (an empty cpuset admits no process). name is one path element.
//
// The returned remove deletes the cgroup and everything below it, deepest
// first; a cgroup that still holds processes cannot be removed and is
// reported. Call it once every pod and agent using the cgroup is gone.
func CreateCgroup(name string) (remove func() error, err error) {
	if name == "" || strings.Contains(name, "/") || name == "." || name == ".." {
		return nil, fmt.Errorf("create cgroup %q: want a single path element", name)
	}
	dirs := cgroupDirs(name)
	if len(dirs) == 0 {
		return nil, fmt.Errorf("create cgroup %q: no cgroup hierarchy is mounted", name)
	}
	remove = func() error {
		var errs []error
		for _, dir := range dirs {
			if err := removeCgroupTree(dir); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	for _, dir := range dirs {
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, errors.Join(fmt.Errorf("create cgroup %s: %w", dir, err), remove())
		}
		for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
			if err := inheritCgroupValue(dir, file); err != nil {
				return nil, errors.Join(err, remove())
			}
		}
	}
	return remove, nil
}

// joinCgroup moves process pid into the cgroup name (made by
// CreateCgroup) in every mounted hierarchy. Its threads move with it; the
// children it already has stay where they are.
func joinCgroup(name string, pid int) error {
	dirs := cgroupDirs(name)
	if len(dirs) == 0 {
		return fmt.Errorf("move process %d into cgroup %q: no cgroup hierarchy is mounted", pid, name)
	}
	for _, dir := range dirs {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("move process %d into cgroup %s: %w", pid, dir, err)
		}
	}
	return nil
}

// CgroupCPU returns the CPU time the cgroup name (a path below the
// hierarchies' mounts: "/" + a CreateCgroup name, or deeper) and its
// descendants used so far: cpuacct.usage in the cgroup v1 hierarchy with
// the cpuacct controller if one is mounted, else cpu.stat's usage_usec in
// the cgroup v2 hierarchy.
func CgroupCPU(name string) (time.Duration, error) {
	mounts, err := readMountInfo()
	if err != nil {
		return 0, fmt.Errorf("cgroup %s: %w", name, err)
	}
	file, v2, err := cgroupCPUFile(mounts, name)
	if err != nil {
		return 0, err
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("cgroup %s: %w", name, err)
	}
	usage, err := parseCgroupCPU(data, v2)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", file, err)
	}
	return usage, nil
}

// cgroupCPUFile is the file that holds cgroup name's CPU usage:
// cpuacct.usage in the cgroup v1 hierarchy with the cpuacct controller,
// else cpu.stat in the cgroup v2 hierarchy (v2 is then true). A v1
// hierarchy wins over a v2 one mounted beside it (a hybrid host's, with no
// controllers).
func cgroupCPUFile(mounts []mountInfo, name string) (file string, v2 bool, err error) {
	unified := ""
	for _, m := range mounts {
		switch {
		case m.fsType == "cgroup" && slices.Contains(m.superOptions, "cpuacct"):
			return filepath.Join(m.target, name, "cpuacct.usage"), false, nil
		case m.fsType == "cgroup2" && unified == "":
			unified = m.target
		}
	}
	if unified == "" {
		return "", false, fmt.Errorf("cgroup %s: neither a cgroup v1 cpuacct nor a cgroup v2 hierarchy is mounted", name)
	}
	return filepath.Join(unified, name, "cpu.stat"), true, nil
}

// parseCgroupCPU reads a cgroup's CPU usage: cgroup v1 cpuacct.usage
// (nanoseconds) or, with v2, cpu.stat's usage_usec.
func parseCgroupCPU(data []byte, v2 bool) (time.Duration, error) {
	if !v2 {
		ns, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("cpuacct.usage: %w", err)
		}
		return time.Duration(ns), nil
	}
	for _, line := range strings.Split(string(data), "\n") {
		key, value, ok := strings.Cut(line, " ")
		if !ok || key != "usage_usec" {
			continue
		}
		us, err := strconv.ParseUint(strings.TrimSpace(value), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("cpu.stat usage_usec: %w", err)
		}
		return time.Duration(us) * time.Microsecond, nil
	}
	return 0, errors.New("cpu.stat: no usage_usec")
}

// inheritCgroupValue copies file from the parent cgroup when dir has it
// empty (cgroup v1 cpuset); a hierarchy without the file is left alone.
func inheritCgroupValue(dir, file string) error {
	data, err := os.ReadFile(filepath.Join(dir, file))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", filepath.Join(dir, file), err)
	}
	if strings.TrimSpace(string(data)) != "" {
		return nil
	}
	parent, err := os.ReadFile(filepath.Join(filepath.Dir(dir), file))
	if err != nil {
		return fmt.Errorf("read %s: %w", filepath.Join(filepath.Dir(dir), file), err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), parent, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Join(dir, file), err)
	}
	return nil
}

// removeCgroupTree removes dir and the cgroups below it, deepest first. A
// missing dir is not an error.
func removeCgroupTree(dir string) error {
	var cgroups []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			cgroups = append(cgroups, path)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	sort.Slice(cgroups, func(i, j int) bool { return len(cgroups[i]) > len(cgroups[j]) })
	var errs []error
	for _, path := range cgroups {
		if err := syscall.Rmdir(path); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", path, err))
		}
	}
	return errors.Join(errs...)
}
