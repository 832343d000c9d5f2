package machine

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Info is what the node needs to know about its host; the kubelet gets it
// from cAdvisor, nodekit reads it from /proc, /sys and statfs.
type Info struct {
	// NumCores is the number of online CPUs this process may run on (the
	// online CPUs intersected with its cpuset).
	NumCores int
	// MemoryCapacity is MemTotal, in bytes.
	MemoryCapacity int64
	// SwapCapacity is SwapTotal, in bytes.
	SwapCapacity int64
	// HugePages lists every huge page size the kernel supports, sorted by
	// size, including sizes with no pages reserved.
	HugePages []HugePages
	// EphemeralStorageCapacity is the size of the filesystem holding the
	// node's root directory, in bytes.
	EphemeralStorageCapacity int64
	// MachineID, SystemUUID and BootID identify the host and its boot.
	// MachineID and SystemUUID are empty when the host does not have them.
	MachineID, SystemUUID, BootID string
	// KernelVersion is the kernel release (uname -r).
	KernelVersion string
	// OSImage is PRETTY_NAME from os-release, or "Linux".
	OSImage string
	// RunningInUserNamespace reports whether this process runs in a user
	// namespace other than the initial one.
	RunningInUserNamespace bool
}

// HugePages is one huge page size and how many pages of it are reserved.
type HugePages struct {
	PageSize int64 // bytes
	NumPages int64
}

// Func returns the host's Info. The returned value is shared:
// callers must not modify it. It must be safe for concurrent use.
type Func func() (*Info, error)

// Roots says where Read finds the host's files, so a test or a
// containerised agent can point it elsewhere.
type Roots struct {
	// HostRoot holds etc/machine-id, var/lib/dbus/machine-id and
	// etc/os-release; default "/".
	HostRoot string
	// ProcRoot is procfs; default "/proc". self/ is this process.
	ProcRoot string
	// SysRoot is sysfs; default "/sys".
	SysRoot string
	// RootDir is the node's root directory (kubelet --root-dir) whose
	// filesystem is the node's ephemeral storage; default "/var/lib/kubelet".
	RootDir string
}

func (r Roots) withDefaults() Roots {
	if r.HostRoot == "" {
		r.HostRoot = "/"
	}
	if r.ProcRoot == "" {
		r.ProcRoot = "/proc"
	}
	if r.SysRoot == "" {
		r.SysRoot = "/sys"
	}
	if r.RootDir == "" {
		r.RootDir = "/var/lib/kubelet"
	}
	return r
}

// Read reads the host's Info from the files under roots. CPUs,
// memory, the boot ID, the kernel version and the root directory's
// filesystem are required; a missing machine ID, system UUID, os-release,
// cpuset or huge page support is not an error. It does not cache: see
// Cached.
func Read(roots Roots) (*Info, error) {
	roots = roots.withDefaults()
	m := &Info{}
	var err error
	if m.NumCores, err = readNumCores(roots); err != nil {
		return nil, err
	}
	if m.MemoryCapacity, m.SwapCapacity, err = readMemInfo(filepath.Join(roots.ProcRoot, "meminfo")); err != nil {
		return nil, err
	}
	if m.HugePages, err = readHugePages(filepath.Join(roots.SysRoot, "kernel/mm/hugepages")); err != nil {
		return nil, err
	}
	if m.EphemeralStorageCapacity, err = filesystemCapacity(roots.RootDir); err != nil {
		return nil, fmt.Errorf("read the capacity of the filesystem of root directory %s: %w", roots.RootDir, err)
	}
	if m.BootID, err = readTrimmed(filepath.Join(roots.ProcRoot, "sys/kernel/random/boot_id")); err != nil {
		return nil, fmt.Errorf("read boot ID: %w", err)
	}
	if m.KernelVersion, err = readTrimmed(filepath.Join(roots.ProcRoot, "sys/kernel/osrelease")); err != nil {
		return nil, fmt.Errorf("read kernel version: %w", err)
	}
	m.MachineID = firstReadable(filepath.Join(roots.HostRoot, "etc/machine-id"), filepath.Join(roots.HostRoot, "var/lib/dbus/machine-id"))
	m.SystemUUID = firstReadable(filepath.Join(roots.SysRoot, "class/dmi/id/product_uuid"),
		filepath.Join(roots.ProcRoot, "device-tree/system-id"), filepath.Join(roots.ProcRoot, "device-tree/vm,uuid"))
	if m.OSImage, err = readOSImage(filepath.Join(roots.HostRoot, "etc/os-release")); err != nil {
		return nil, err
	}
	if m.RunningInUserNamespace, err = readInUserNamespace(filepath.Join(roots.ProcRoot, "self/uid_map")); err != nil {
		return nil, err
	}
	return m, nil
}

// Cached returns a Func that calls read until it succeeds once
// and then returns that result forever, as the kubelet caches cAdvisor's
// machine info. It is safe for concurrent use.
func Cached(read Func) Func {
	var (
		mu     sync.Mutex
		cached *Info
	)
	return func() (*Info, error) {
		mu.Lock()
		defer mu.Unlock()
		if cached != nil {
			return cached, nil
		}
		m, err := read()
		if err != nil {
			return nil, err
		}
		cached = m
		return m, nil
	}
}

func readTrimmed(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}

// firstReadable returns the trimmed content of the first path that reads,
// or "".
func firstReadable(paths ...string) string {
	for _, p := range paths {
		// device-tree strings end in NUL.
		if s, err := readTrimmed(p); err == nil {
			if s = strings.TrimRight(s, "\x00"); s != "" {
				return s
			}
		}
	}
	return ""
}

// readNumCores counts the online CPUs in this process's cpuset.
func readNumCores(roots Roots) (int, error) {
	onlinePath := filepath.Join(roots.SysRoot, "devices/system/cpu/online")
	raw, err := readTrimmed(onlinePath)
	if err != nil {
		return 0, fmt.Errorf("read online CPUs: %w", err)
	}
	online, err := parseCPUList(raw)
	if err != nil {
		return 0, fmt.Errorf("parse online CPUs in %s: %w", onlinePath, err)
	}
	statusPath := filepath.Join(roots.ProcRoot, "self/status")
	allowedList, err := statusField(statusPath, "Cpus_allowed_list")
	if err != nil {
		return 0, err
	}
	n := len(online)
	if allowedList != "" {
		allowed, err := parseCPUList(allowedList)
		if err != nil {
			return 0, fmt.Errorf("parse Cpus_allowed_list in %s: %w", statusPath, err)
		}
		n = 0
		for cpu := range online {
			if allowed[cpu] {
				n++
			}
		}
	}
	if n == 0 {
		return 0, fmt.Errorf("no online CPU in this process's cpuset (%s, %s)", onlinePath, statusPath)
	}
	return n, nil
}

// parseCPUList parses the kernel's list format, e.g. "0-3,8,10-11".
func parseCPUList(s string) (map[int]bool, error) {
	cpus := map[int]bool{}
	if s == "" {
		return cpus, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil || first < 0 {
			return nil, fmt.Errorf("bad CPU %q in %q", lo, s)
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil || last < first {
				return nil, fmt.Errorf("bad CPU range %q in %q", part, s)
			}
		}
		if last-first > 1<<16 {
			return nil, fmt.Errorf("CPU range %q in %q is too large", part, s)
		}
		for c := first; c <= last; c++ {
			cpus[c] = true
		}
	}
	return cpus, nil
}

// statusField returns a field of /proc/<pid>/status, "" if absent.
func statusField(path, key string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && k == key {
			return strings.TrimSpace(v), nil
		}
	}
	return "", nil
}

// readMemInfo returns MemTotal and SwapTotal in bytes.
func readMemInfo(path string) (memTotal, swapTotal int64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, fmt.Errorf("read memory info: %w", err)
	}
	found := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "MemTotal" && key != "SwapTotal") {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, 0, fmt.Errorf("parse %s in %s: %q is not \"<n> kB\"", key, path, strings.TrimSpace(rest))
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil || kb < 0 || kb > (1<<53) {
			return 0, 0, fmt.Errorf("parse %s in %s: bad value %q", key, path, fields[0])
		}
		if key == "MemTotal" {
			memTotal, found = kb*1024, true
		} else {
			swapTotal = kb * 1024
		}
	}
	if !found || memTotal == 0 {
		return 0, 0, fmt.Errorf("no MemTotal in %s", path)
	}
	return memTotal, swapTotal, nil
}

// readHugePages lists <dir>/hugepages-<size>kB/nr_hugepages. A missing dir
// means the kernel has no huge pages.
func readHugePages(dir string) ([]HugePages, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read huge page sizes: %w", err)
	}
	var out []HugePages
	for _, e := range entries {
		sizeKB, ok := strings.CutPrefix(e.Name(), "hugepages-")
		if !ok {
			continue
		}
		sizeKB, ok = strings.CutSuffix(sizeKB, "kB")
		kb, err := strconv.ParseInt(sizeKB, 10, 64)
		if !ok || err != nil || kb <= 0 || kb > (1<<40) {
			return nil, fmt.Errorf("bad huge page directory %s in %s", e.Name(), dir)
		}
		path := filepath.Join(dir, e.Name(), "nr_hugepages")
		raw, err := readTrimmed(path)
		if err != nil {
			return nil, fmt.Errorf("read huge pages: %w", err)
		}
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("parse %s: bad value %q", path, raw)
		}
		out = append(out, HugePages{PageSize: kb * 1024, NumPages: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PageSize < out[j].PageSize })
	return out, nil
}

// readOSImage returns PRETTY_NAME from an os-release file, or "Linux" when
// the file or the key is missing, as cAdvisor does.
func readOSImage(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "Linux", nil
	}
	if err != nil {
		return "", fmt.Errorf("read OS image: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "PRETTY_NAME="); ok {
			if uq, err := strconv.Unquote(v); err == nil {
				v = uq
			} else {
				v = strings.Trim(v, `"'`)
			}
			if v != "" {
				return v, nil
			}
		}
	}
	return "Linux", nil
}

// readInUserNamespace reports whether uid_map maps anything but the whole
// initial namespace. An unreadable map means no user namespace support.
func readInUserNamespace(path string) (bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read user namespace map: %w", err)
	}
	fields := strings.Fields(string(b))
	initial := len(fields) == 3 && fields[0] == "0" && fields[1] == "0" && fields[2] == "4294967295"
	return !initial, nil
}
