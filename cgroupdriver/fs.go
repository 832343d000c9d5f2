package cgroupdriver

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// defaultCgroupFSRoot is where the cgroup hierarchies are mounted.
const defaultCgroupFSRoot = "/sys/fs/cgroup"

var (
	// v1RequiredControllers are the cgroup v1 controllers nodekit writes to;
	// a v1 tree without one of them is refused.
	v1RequiredControllers = []string{"cpu", "memory", "pids"}
	// v1ValidatedControllers are the hierarchies (when mounted) in which a
	// cgroup must exist for Exists to report it, the kubelet's allow list.
	v1ValidatedControllers = []string{"cpu", "cpuacct", "cpuset", "memory", "pids", "hugetlb", "systemd"}
	// v2ValidatedControllers are the controllers (when the root offers them)
	// a cgroup v2 cgroup must have for Exists to report it.
	v2ValidatedControllers = []string{"cpu", "cpuset", "hugetlb", "memory", "pids"}
)

// tree is the filesystem side shared by both drivers: it creates, writes,
// reads and removes cgroup directories below a root that holds either the
// cgroup v1 hierarchies (one directory per controller, as /sys/fs/cgroup on a
// v1 or hybrid host) or the cgroup v2 unified hierarchy.
//
// When the root is not a mounted cgroup filesystem (a test tree made of plain
// directories), the tree emulates what the kernel does on its own: writing a
// control file creates it, and removing a cgroup removes its control files
// first. On a real cgroup filesystem neither ever happens.
//
// The layout is detected on first use and cached; a failed detection is
// retried on the next call. tree is safe for concurrent use.
type tree struct {
	root    string
	version int // requested version; 0 detects

	mu     sync.Mutex
	layout *layout
}

// layout is what detection found below the root.
type layout struct {
	version  int
	emulated bool
	// dirs are the hierarchy directories (deduplicated, symlinks resolved);
	// on v2 the root alone.
	dirs []string
	// controllers maps a v1 controller name to its hierarchy directory.
	controllers map[string]string
	// available are the controllers the v2 root offers to its children.
	available []string
}

func newTree(root string, version int) *tree {
	return &tree{root: root, version: version}
}

// detect returns the cached layout or detects it.
func (t *tree) detect() (*layout, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.layout != nil {
		return t.layout, nil
	}
	l, err := detectLayout(t.root, t.version)
	if err != nil {
		return nil, err
	}
	t.layout = l
	return l, nil
}

func detectLayout(root string, version int) (*layout, error) {
	st, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("cgroup filesystem root %s: %w", root, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("cgroup filesystem root %s: not a directory", root)
	}
	if version == 0 {
		version = 1
		if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
			version = 2
		}
	}
	switch version {
	case 1:
		return detectV1(root)
	case 2:
		return detectV2(root)
	}
	return nil, fmt.Errorf("cgroup filesystem root %s: unsupported cgroup version %d", root, version)
}

func detectV2(root string) (*layout, error) {
	data, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("cgroup v2 root %s: %w", root, err)
	}
	return &layout{
		version:   2,
		emulated:  !isCgroupMount(root),
		dirs:      []string{root},
		available: strings.Fields(string(data)),
	}, nil
}

func detectV1(root string) (*layout, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("cgroup v1 root %s: %w", root, err)
	}
	type hier struct {
		name, dir string
		mounted   bool
	}
	var found []hier
	anyMounted := false
	for _, e := range entries {
		p := filepath.Join(root, e.Name())
		st, err := os.Stat(p)
		if err != nil || !st.IsDir() {
			continue
		}
		dir, err := filepath.EvalSymlinks(p)
		if err != nil {
			return nil, fmt.Errorf("cgroup v1 root %s: resolve %s: %w", root, p, err)
		}
		mounted := isCgroupMount(dir)
		anyMounted = anyMounted || mounted
		found = append(found, hier{name: e.Name(), dir: dir, mounted: mounted})
	}
	l := &layout{version: 1, emulated: !anyMounted, controllers: map[string]string{}}
	for _, h := range found {
		if anyMounted && !h.mounted {
			continue // a stray directory on the tmpfs, not a hierarchy
		}
		if !slices.Contains(l.dirs, h.dir) {
			l.dirs = append(l.dirs, h.dir)
		}
		for _, c := range strings.Split(h.name, ",") {
			l.controllers[c] = h.dir
		}
	}
	for _, c := range v1RequiredControllers {
		if _, ok := l.controllers[c]; !ok {
			return nil, fmt.Errorf("cgroup v1 root %s: controller %q is not mounted", root, c)
		}
	}
	return l, nil
}

// checkLiteral refuses paths that are not a clean absolute cgroup path, so a
// literal can never point outside the hierarchies.
func checkLiteral(literal string) error {
	if !strings.HasPrefix(literal, "/") || path.Clean(literal) != literal {
		return fmt.Errorf("cgroup path %q is not a clean absolute path", literal)
	}
	return nil
}

// create makes the cgroup literal (and its missing ancestors) in every
// hierarchy.
func (t *tree) create(literal string) error {
	l, err := t.prepare(literal)
	if err != nil {
		return err
	}
	parts := strings.Split(strings.Trim(literal, "/"), "/")
	if literal == "/" {
		parts = nil
	}
	if l.version == 2 {
		return t.createV2(l, parts)
	}
	for _, dir := range l.dirs {
		cpuset := l.controllers["cpuset"] == dir
		cur := dir
		for _, p := range parts {
			parent := cur
			cur = filepath.Join(cur, p)
			created, err := mkdir(cur)
			if err != nil {
				return err
			}
			if created && cpuset {
				if err := copyCpuset(l, parent, cur); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// createV2 creates the cgroup below the v2 root, enabling in each ancestor
// the controllers the root offers (as runc does), so the new cgroup has the
// cpu, memory and pids files.
func (t *tree) createV2(l *layout, parts []string) error {
	cur := l.dirs[0]
	for _, p := range parts {
		if err := enableControllers(l, cur); err != nil {
			return err
		}
		cur = filepath.Join(cur, p)
		if _, err := mkdir(cur); err != nil {
			return err
		}
	}
	return nil
}

// enableControllers adds the root's controllers to dir's
// cgroup.subtree_control when some are missing. When the kernel refuses the
// whole set, each controller is tried alone; a controller that stays off is
// reported by the writes of its files.
func enableControllers(l *layout, dir string) error {
	if len(l.available) == 0 {
		return nil
	}
	current, err := readString(dir, "cgroup.subtree_control")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	enabled := strings.Fields(current)
	var missing, plus []string
	for _, c := range l.available {
		if !slices.Contains(enabled, c) {
			missing = append(missing, c)
			plus = append(plus, "+"+c)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if l.emulated {
		// The file then lists the enabled controllers, as the kernel's does.
		return writeFile(l, dir, "cgroup.subtree_control", strings.Join(append(enabled, missing...), " "))
	}
	if err := writeFile(l, dir, "cgroup.subtree_control", strings.Join(plus, " ")); err == nil {
		return nil
	}
	for _, p := range plus {
		_ = writeFile(l, dir, "cgroup.subtree_control", p) // reported by the later writes
	}
	return nil
}

// copyCpuset gives a new v1 cpuset cgroup its parent's cpus and mems, which
// the kernel leaves empty (a task could not join it otherwise).
func copyCpuset(l *layout, parent, child string) error {
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		v, err := readString(parent, f)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if strings.TrimSpace(v) == "" {
			continue
		}
		if err := writeFile(l, child, f, strings.TrimSpace(v)); err != nil {
			return err
		}
	}
	return nil
}

// set writes r to the cgroup literal, which must exist.
func (t *tree) set(literal string, r ResourceConfig) error {
	l, err := t.prepare(literal)
	if err != nil {
		return err
	}
	if l.version == 2 {
		dir := filepath.Join(l.dirs[0], literal)
		for _, f := range v2Files(r) {
			if err := writeFile(l, dir, f.file, f.value); err != nil {
				return err
			}
		}
		return nil
	}
	files := v1Files(r)
	var retryPeriod *cgroupFile
	for i, f := range files {
		dir := filepath.Join(l.controllers[f.controller], literal)
		err := writeFile(l, dir, f.file, f.value)
		// A smaller period can be refused (EINVAL) until the quota that goes
		// with it is written: retry it after the quota, as runc does.
		if err != nil && f.file == "cpu.cfs_period_us" && errors.Is(err, unix.EINVAL) &&
			i+1 < len(files) && files[i+1].file == "cpu.cfs_quota_us" {
			retryPeriod = &files[i]
			continue
		}
		if err != nil {
			return err
		}
		if retryPeriod != nil && f.file == "cpu.cfs_quota_us" {
			if err := writeFile(l, filepath.Join(l.controllers["cpu"], literal), retryPeriod.file, retryPeriod.value); err != nil {
				return err
			}
			retryPeriod = nil
		}
	}
	return nil
}

// read returns the values of literal's control files; a field whose file
// does not exist stays nil.
func (t *tree) read(literal string) (ResourceConfig, error) {
	var rc ResourceConfig
	l, err := t.prepare(literal)
	if err != nil {
		return rc, err
	}
	get := func(controller, file string) (string, bool, error) {
		dir := l.dirs[0]
		if l.version == 1 {
			dir = l.controllers[controller]
		}
		v, err := readString(filepath.Join(dir, literal), file)
		if errors.Is(err, fs.ErrNotExist) {
			return "", false, nil
		}
		return strings.TrimSpace(v), err == nil, err
	}
	readLimit := func(controller, file string, dst **int64) error {
		s, ok, err := get(controller, file)
		if !ok {
			return err
		}
		v, err := parseLimit(s)
		if err != nil {
			return fmt.Errorf("cgroup %s: %s: %w", literal, file, err)
		}
		*dst = &v
		return nil
	}
	readUint := func(controller, file string, conv func(uint64) uint64, dst **uint64) error {
		s, ok, err := get(controller, file)
		if !ok {
			return err
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("cgroup %s: %s: %w", literal, file, err)
		}
		v = conv(v)
		*dst = &v
		return nil
	}
	same := func(v uint64) uint64 { return v }
	var errs []error
	if l.version == 1 {
		errs = append(errs,
			readUint("cpu", "cpu.shares", same, &rc.CPUShares),
			readLimit("cpu", "cpu.cfs_quota_us", &rc.CPUQuota),
			readUint("cpu", "cpu.cfs_period_us", same, &rc.CPUPeriod),
			readLimit("memory", "memory.limit_in_bytes", &rc.Memory))
	} else {
		errs = append(errs,
			readUint("", "cpu.weight", cpuWeightToShares, &rc.CPUShares),
			readCPUMax(get, literal, &rc),
			readLimit("", "memory.max", &rc.Memory))
	}
	errs = append(errs, readLimit("pids", "pids.max", &rc.PidsLimit))
	return rc, errors.Join(errs...)
}

func readCPUMax(get func(controller, file string) (string, bool, error), literal string, rc *ResourceConfig) error {
	s, ok, err := get("", "cpu.max")
	if !ok {
		return err
	}
	fields := strings.Fields(s)
	if len(fields) != 2 {
		return fmt.Errorf("cgroup %s: cpu.max: unexpected content %q", literal, s)
	}
	quota, err := parseLimit(fields[0])
	if err != nil {
		return fmt.Errorf("cgroup %s: cpu.max: %w", literal, err)
	}
	period, err := strconv.ParseUint(fields[1], 10, 64)
	if err != nil {
		return fmt.Errorf("cgroup %s: cpu.max: %w", literal, err)
	}
	rc.CPUQuota, rc.CPUPeriod = &quota, &period
	return nil
}

// exists reports whether literal exists in every validated hierarchy (v1)
// or exists with the validated controllers enabled (v2).
func (t *tree) exists(literal string) (bool, error) {
	l, err := t.prepare(literal)
	if err != nil {
		return false, err
	}
	if l.version == 2 {
		dir := filepath.Join(l.dirs[0], literal)
		if ok, err := isDir(dir); !ok || err != nil {
			return false, err
		}
		data, err := readString(dir, "cgroup.controllers")
		if errors.Is(err, fs.ErrNotExist) {
			return true, nil // an emulated tree has no cgroup.controllers
		}
		if err != nil {
			return false, err
		}
		have := strings.Fields(data)
		for _, c := range v2ValidatedControllers {
			if slices.Contains(l.available, c) && !slices.Contains(have, c) {
				return false, nil
			}
		}
		return true, nil
	}
	for _, c := range v1ValidatedControllers {
		dir, ok := l.controllers[c]
		if !ok {
			continue
		}
		if ok, err := isDir(filepath.Join(dir, literal)); !ok || err != nil {
			return false, err
		}
	}
	return true, nil
}

// children returns the sorted names of literal's child directories in any
// hierarchy.
func (t *tree) children(literal string) ([]string, error) {
	l, err := t.prepare(literal)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, dir := range l.dirs {
		entries, err := os.ReadDir(filepath.Join(dir, literal))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list cgroup %s: %w", literal, err)
		}
		for _, e := range entries {
			if e.IsDir() && !slices.Contains(names, e.Name()) {
				names = append(names, e.Name())
			}
		}
	}
	slices.Sort(names)
	return names, nil
}

// pids returns the sorted, deduplicated processes in literal and below it,
// in any hierarchy.
func (t *tree) pids(literal string) ([]int, error) {
	l, err := t.prepare(literal)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, dir := range l.dirs {
		err := filepath.WalkDir(filepath.Join(dir, literal), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil // the cgroup is absent here, or vanished meanwhile
				}
				return err
			}
			if !d.IsDir() {
				return nil
			}
			got, err := readPids(p)
			pids = append(pids, got...)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("list processes of cgroup %s: %w", literal, err)
		}
	}
	slices.Sort(pids)
	return slices.Compact(pids), nil
}

func readPids(dir string) ([]int, error) {
	f, err := os.Open(filepath.Join(dir, "cgroup.procs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var pids []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		pid, err := strconv.Atoi(line)
		if err != nil {
			return nil, fmt.Errorf("%s: unexpected line %q", f.Name(), line)
		}
		pids = append(pids, pid)
	}
	return pids, sc.Err()
}

// remove deletes literal and every cgroup below it from every hierarchy. A
// missing cgroup is not an error; a cgroup that still has processes fails
// with an error wrapping unix.EBUSY.
func (t *tree) remove(literal string) error {
	l, err := t.prepare(literal)
	if err != nil {
		return err
	}
	if literal == "/" {
		return errors.New("refusing to remove the root cgroup")
	}
	var errs []error
	for _, dir := range l.dirs {
		if err := removeCgroup(l, filepath.Join(dir, literal)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func removeCgroup(l *layout, dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		switch {
		case e.IsDir():
			if err := removeCgroup(l, p); err != nil {
				return err
			}
		case l.emulated:
			if err := os.Remove(p); err != nil {
				return fmt.Errorf("remove cgroup %s: %w", dir, err)
			}
		}
	}
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	return nil
}

// prepare detects the layout and checks literal.
func (t *tree) prepare(literal string) (*layout, error) {
	if err := checkLiteral(literal); err != nil {
		return nil, err
	}
	return t.detect()
}

// mkdir creates dir, reporting whether it did; an existing dir is fine.
func mkdir(dir string) (bool, error) {
	err := os.Mkdir(dir, 0o755)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	return false, fmt.Errorf("create cgroup %s: %w", dir, err)
}

func isDir(p string) (bool, error) {
	st, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return st.IsDir(), nil
}

func readString(dir, file string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, file))
	return string(data), err
}

// writeFile writes value to a control file in one write. On an emulated
// tree the file is created or truncated, as the kernel's files behave.
func writeFile(l *layout, dir, file, value string) error {
	flags := os.O_WRONLY
	if l.emulated {
		flags |= os.O_CREATE | os.O_TRUNC
	}
	p := filepath.Join(dir, file)
	f, err := os.OpenFile(p, flags, 0o644)
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, p, err)
	}
	_, werr := f.WriteString(value)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		return fmt.Errorf("write %q to %s: %w", value, p, err)
	}
	return nil
}
