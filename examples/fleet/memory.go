package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// unlimited is where a cgroup v1 memory.limit_in_bytes reads "no limit"
// (the kernel prints the largest page-aligned int64).
const unlimited = 1 << 62

// containerMemoryLimit returns the memory limit of the cgroup this process
// runs in (a container's: the pod's resources.limits.memory), the lowest
// of its cgroup's and its ancestors', or 0 when none is set. root is the
// cgroup file system's mount point (/sys/fs/cgroup) and self the content
// of /proc/self/cgroup. Under cgroup v2 it reads memory.max; under v1 the
// memory controller's memory.limit_in_bytes. A container without a cgroup
// namespace sees its own cgroup at the mount's root while /proc/self/cgroup
// names the host's path: the directories of that path that do not exist are
// skipped, the root is read all the same.
func containerMemoryLimit(root string, self []byte) (int64, error) {
	dir, file, err := memoryCgroup(root, self)
	if err != nil || dir == "" {
		return 0, err
	}
	var limit int64
	for p := path.Clean("/" + dir); ; p = path.Dir(p) {
		data, err := os.ReadFile(filepath.Join(file.mount, p, file.name))
		switch {
		case err == nil:
			v := strings.TrimSpace(string(data))
			if v != "max" {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("memory limit of cgroup %s: %s: %w", p, file.name, err)
				}
				if n > 0 && n < unlimited && (limit == 0 || n < limit) {
					limit = n
				}
			}
		case !os.IsNotExist(err):
			return 0, fmt.Errorf("memory limit of cgroup %s: %w", p, err)
		}
		if p == "/" {
			return limit, nil
		}
	}
}

// limitFile is where a cgroup hierarchy keeps its memory limit.
type limitFile struct{ mount, name string }

// memoryCgroup returns this process's cgroup in the hierarchy with the
// memory controller and where its limit is read, from /proc/self/cgroup's
// lines (hierarchy-ID:controllers:path); "" when it has none.
func memoryCgroup(root string, self []byte) (string, limitFile, error) {
	var v2 string
	sc := bufio.NewScanner(bytes.NewReader(self))
	for sc.Scan() {
		id, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		controllers, dir, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		if id == "0" && controllers == "" {
			v2 = dir
			continue
		}
		for _, c := range strings.Split(controllers, ",") {
			if c == "memory" {
				return dir, limitFile{mount: filepath.Join(root, "memory"), name: "memory.limit_in_bytes"}, nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", limitFile{}, err
	}
	if v2 != "" {
		return v2, limitFile{mount: root, name: "memory.max"}, nil
	}
	return "", limitFile{}, nil
}
