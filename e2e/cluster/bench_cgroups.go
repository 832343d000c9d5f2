package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
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
