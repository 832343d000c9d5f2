package stats

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// unlimited is the value a limit takes when the cgroup sets none.
const unlimited = math.MaxUint64

// maxMemorySize is where the kubelet starts to consider a memory limit
// unlimited (not MaxInt64, because the kernel rounds it to a page).
const maxMemorySize = uint64(1 << 62)

// cgroupLayout says where a cgroup's files are: on cgroup v2 all of them
// under one root; on cgroup v1 (hybrid hosts included) under the hierarchy
// of each controller.
type cgroupLayout struct {
	version int
	// v1 hierarchy directories; on v2 all equal the root.
	cpuacct, cpu, memory string
}

// cgroupFS reads cgroup statistics from a cgroup filesystem root, detecting
// its layout on first use. Safe for concurrent use; reads go through the
// caller's reader.
type cgroupFS struct {
	root    string
	version int // 0: detect

	mu     sync.Mutex
	layout *cgroupLayout
	// noSwapFiles is set once a cgroup's swap limit file (v1
	// memory.memsw.limit_in_bytes, absent without swap accounting) or
	// swap usage file (v2 memory.swap.current, absent without swap
	// support) was found missing: the kernel does not grow them later.
	noSwapFiles atomic.Bool
}

// detect returns the layout, detecting it once: the root is cgroup v2 when
// it holds cgroup.controllers, v1 otherwise, with the cpuacct, cpu and
// memory hierarchies found by name ("cpu,cpuacct" and its symlinks
// included).
func (c *cgroupFS) detect() (*cgroupLayout, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.layout != nil {
		return c.layout, nil
	}
	version := c.version
	if version == 0 {
		version = 1
		if _, err := os.Stat(filepath.Join(c.root, "cgroup.controllers")); err == nil {
			version = 2
		}
	}
	l := &cgroupLayout{version: version}
	switch version {
	case 2:
		if st, err := os.Stat(c.root); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("cgroup v2 root %s is not a directory", c.root)
		}
		l.cpuacct, l.cpu, l.memory = c.root, c.root, c.root
	case 1:
		find := func(names ...string) string {
			for _, n := range names {
				p := filepath.Join(c.root, n)
				if st, err := os.Stat(p); err == nil && st.IsDir() {
					return p
				}
			}
			return ""
		}
		l.cpuacct = find("cpuacct", "cpu,cpuacct", "cpuacct,cpu")
		l.cpu = find("cpu", "cpu,cpuacct", "cpuacct,cpu")
		l.memory = find("memory")
		if l.cpuacct == "" || l.memory == "" {
			return nil, fmt.Errorf("cgroup v1 root %s: no cpuacct or memory hierarchy", c.root)
		}
		if l.cpu == "" {
			l.cpu = l.cpuacct
		}
	default:
		return nil, fmt.Errorf("cgroup root %s: unsupported cgroup version %d", c.root, version)
	}
	c.layout = l
	return l, nil
}

// cgroupSample holds the counters of one cgroup at one time, in cAdvisor's
// terms.
type cgroupSample struct {
	time time.Time
	// cpu is the cumulative CPU time in nanoseconds.
	cpu uint64
	// Memory in bytes: usage (v1 memory.usage_in_bytes, v2
	// memory.current), workingSet (usage less inactive file pages), rss
	// (anonymous), cache (page cache) and swap; limit is unlimited when
	// none is set.
	usage, workingSet, rss, cache, swap uint64
	limit, swapLimit                    uint64
	hasSwap                             bool
	pgfault, pgmajfault                 uint64
}

// read samples the cgroup literal (a cgroupfs path below the root, e.g.
// "/kubepods/burstable/pod<uid>"; "/" is the root cgroup). mem gives the
// host memory, which is the root cgroup's limit (as cAdvisor sets it) and
// its swap usage. A cgroup that does not exist fails with an error
// wrapping fs.ErrNotExist.
func (c *cgroupFS) read(r *reader, literal string, mem memInfo, now time.Time) (cgroupSample, error) {
	l, err := c.detect()
	if err != nil {
		return cgroupSample{}, err
	}
	if !strings.HasPrefix(literal, "/") || path.Clean(literal) != literal {
		return cgroupSample{}, fmt.Errorf("cgroup path %q is not a clean absolute path", literal)
	}
	s := cgroupSample{time: now, limit: unlimited, swapLimit: unlimited}
	// The root cgroup's files are the node's (reader.readFile); a pod's
	// go away with the pod.
	root := literal == "/"
	if l.version == 2 {
		err = c.readV2(r, filepath.Join(l.memory, literal), root, mem, &s)
	} else {
		err = c.readV1(r, l, literal, root, &s)
	}
	if err != nil {
		return cgroupSample{}, fmt.Errorf("read cgroup %s: %w", literal, err)
	}
	if root {
		s.limit, s.swapLimit = mem.total, mem.swapTotal
	}
	return s, nil
}

func (c *cgroupFS) readV1(r *reader, l *cgroupLayout, literal string, root bool, s *cgroupSample) error {
	var err error
	if s.cpu, err = r.readUint(filepath.Join(l.cpuacct, literal, "cpuacct.usage"), root); err != nil {
		return err
	}
	dir := filepath.Join(l.memory, literal)
	if s.usage, err = r.readUint(filepath.Join(dir, "memory.usage_in_bytes"), root); err != nil {
		return err
	}
	if s.limit, err = r.readUint(filepath.Join(dir, "memory.limit_in_bytes"), root); err != nil && !isNotExist(err) {
		return err
	}
	if !c.noSwapFiles.Load() {
		sw, err := r.readUint(filepath.Join(dir, "memory.memsw.limit_in_bytes"), root)
		switch {
		case err == nil:
			s.swapLimit = sw
		case isNotExist(err) && literal != "/":
			c.noSwapFiles.Store(true)
		}
	}
	b, err := r.readFile(filepath.Join(dir, "memory.stat"), root)
	if err != nil {
		return err
	}
	var inactive, totalInactive uint64
	var local, total cgroupSample
	var haveTotal, haveTotalInactive, haveInactive bool
	eachLine(b, func(line []byte) {
		k, v, ok := keyValue(line)
		if !ok {
			return
		}
		switch string(k) {
		case "total_rss":
			total.rss, haveTotal = v, true
		case "total_cache":
			total.cache = v
		case "total_swap":
			total.swap, total.hasSwap = v, true
		case "total_inactive_file":
			totalInactive, haveTotalInactive = v, true
		case "rss":
			local.rss = v
		case "cache":
			local.cache = v
		case "swap":
			local.swap, local.hasSwap = v, true
		case "inactive_file":
			inactive, haveInactive = v, true
		case "pgfault":
			s.pgfault = v
		case "pgmajfault":
			s.pgmajfault = v
		}
	})
	// The hierarchical totals when the kernel keeps them (use_hierarchy,
	// always on since Linux 5.x), as cAdvisor reads them.
	from := local
	if haveTotal {
		from = total
	}
	s.rss, s.cache, s.swap, s.hasSwap = from.rss, from.cache, from.swap, from.hasSwap
	if haveTotalInactive {
		inactive, haveInactive = totalInactive, true
	}
	subtractInactive(s, inactive, haveInactive)
	return nil
}

func (c *cgroupFS) readV2(r *reader, dir string, root bool, mem memInfo, s *cgroupSample) error {
	b, err := r.readFile(filepath.Join(dir, "cpu.stat"), root)
	if err != nil {
		return err
	}
	eachLine(b, func(line []byte) {
		if k, v, ok := keyValue(line); ok && string(k) == "usage_usec" {
			s.cpu = v * 1000
		}
	})
	b, err = r.readFile(filepath.Join(dir, "memory.stat"), root)
	if err != nil {
		return err
	}
	var anon, file, inactive uint64
	var haveInactive bool
	eachLine(b, func(line []byte) {
		k, v, ok := keyValue(line)
		if !ok {
			return
		}
		switch string(k) {
		case "anon":
			anon = v
		case "file":
			file = v
		case "inactive_file":
			inactive, haveInactive = v, true
		case "pgfault":
			s.pgfault = v
		case "pgmajfault":
			s.pgmajfault = v
		}
	})
	s.rss, s.cache = anon, file
	usage, err := r.readUint(filepath.Join(dir, "memory.current"), root)
	switch {
	case err == nil:
		s.usage = usage
		if s.limit, err = r.readUint(filepath.Join(dir, "memory.max"), root); err != nil && !isNotExist(err) {
			return err
		}
		if !c.noSwapFiles.Load() {
			sw, err := r.readUint(filepath.Join(dir, "memory.swap.current"), root)
			if isNotExist(err) {
				c.noSwapFiles.Store(true)
			} else if err == nil {
				s.swap, s.hasSwap = sw, true
				if sw, err := r.readUint(filepath.Join(dir, "memory.swap.max"), root); err == nil {
					s.swapLimit = sw
				}
			}
		}
	case root && isNotExist(err):
		// The root cgroup has no memory.current: its usage is anon + file,
		// and its swap the host's, as runc (and so cAdvisor) emulate them.
		s.usage = anon + file
		s.swap, s.hasSwap = mem.swapTotal-min(mem.swapFree, mem.swapTotal), true
	default:
		return err
	}
	subtractInactive(s, inactive, haveInactive)
	return nil
}

// subtractInactive sets the working set as cAdvisor and so the kubelet
// compute it: usage less inactive file pages, floored at zero.
func subtractInactive(s *cgroupSample, inactive uint64, have bool) {
	s.workingSet = s.usage
	if !have {
		return
	}
	if inactive > s.usage {
		s.workingSet = 0
	} else {
		s.workingSet = s.usage - inactive
	}
}

// procsDir returns the directory of cgroup literal in the hierarchy whose
// cgroup.procs the provider reads (cpu on v1, as cAdvisor counts processes).
func (c *cgroupFS) procsDir(literal string) (string, error) {
	l, err := c.detect()
	if err != nil {
		return "", err
	}
	return filepath.Join(l.cpu, literal), nil
}

// children returns the names of the child cgroups of literal.
func (c *cgroupFS) children(literal string) ([]string, error) {
	dir, err := c.procsDir(literal)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// procs returns the process IDs listed in the cgroup.procs of literal.
func (c *cgroupFS) procs(r *reader, literal string) ([]int, error) {
	dir, err := c.procsDir(literal)
	if err != nil {
		return nil, err
	}
	b, err := r.read(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	var perr error
	eachLine(b, func(line []byte) {
		v, err := parseUint(bytes.TrimSpace(line))
		if err != nil || v > math.MaxInt32 {
			perr = errors.Join(perr, fmt.Errorf("cgroup %s: bad process ID %q", literal, line))
			return
		}
		pids = append(pids, int(v))
	})
	return pids, perr
}

// creationTime estimates when the cgroup literal was created, as cAdvisor
// does: the older of its directory's and its cgroup.clone_children (v1) or
// cgroup.events (v2) modification times, and never before boot.
func (c *cgroupFS) creationTime(literal string, boot time.Time) time.Time {
	l, err := c.detect()
	if err != nil {
		return time.Time{}
	}
	dir := filepath.Join(l.memory, literal)
	marker := "cgroup.clone_children"
	if l.version == 2 {
		marker = "cgroup.events"
	}
	var oldest time.Time
	for _, p := range []string{dir, filepath.Join(dir, marker)} {
		if st, err := os.Stat(p); err == nil && (oldest.IsZero() || st.ModTime().Before(oldest)) {
			oldest = st.ModTime()
		}
	}
	if !oldest.IsZero() && oldest.Before(boot) {
		oldest = boot
	}
	return oldest
}
