package stats

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// defaultInterfaceName is the interface the kubelet reports as a network's
// default (NetworkStats.InterfaceStats), as cAdvisor's consumers do.
const defaultInterfaceName = "eth0"

// ignoredInterfacePrefixes are the interfaces cAdvisor leaves out of a
// network namespace's stats (loopback and the host ends of container links).
var ignoredInterfacePrefixes = []string{"lo", "veth", "docker", "nerdctl"}

// memInfo holds what the provider reads from /proc/meminfo.
type memInfo struct {
	total, swapTotal, swapFree uint64 // bytes
}

// readMemInfo reads MemTotal, SwapTotal and SwapFree from the node's
// meminfo file.
func (r *reader) readMemInfo(path string) (memInfo, error) {
	b, err := r.readFile(path, true)
	if err != nil {
		return memInfo{}, err
	}
	var m memInfo
	found := false
	eachLine(b, func(line []byte) {
		key, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return
		}
		var dst *uint64
		switch string(key) {
		case "MemTotal":
			dst, found = &m.total, true
		case "SwapTotal":
			dst = &m.swapTotal
		case "SwapFree":
			dst = &m.swapFree
		default:
			return
		}
		var buf [2][]byte
		fields := appendFields(buf[:0], rest)
		if len(fields) == 0 {
			return
		}
		v, err := strconv.ParseUint(string(fields[0]), 10, 64)
		if err != nil {
			return
		}
		if len(fields) > 1 && string(fields[1]) == "kB" {
			v *= 1024
		}
		*dst = v
	})
	if !found || m.total == 0 {
		return memInfo{}, fmt.Errorf("no MemTotal in %s", path)
	}
	return m, nil
}

// readBootTime returns the boot time from the btime line of /proc/stat.
func (r *reader) readBootTime(path string) (time.Time, error) {
	b, err := r.read(path)
	if err != nil {
		return time.Time{}, err
	}
	var boot time.Time
	eachLine(b, func(line []byte) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			if s, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64); err == nil {
				boot = time.Unix(s, 0)
			}
		}
	})
	if boot.IsZero() {
		return time.Time{}, fmt.Errorf("no btime in %s", path)
	}
	return boot, nil
}

// readRlimit returns the kernel's task limit and the number of tasks, as
// the kubelet's pidlimit package computes them: the smaller of
// kernel.pid_max and kernel.threads-max, and the total in the fourth field
// of /proc/loadavg ("running/total"). Either is nil when it cannot be read.
func (r *reader) readRlimit(procRoot string) (maxPID, tasks *int64) {
	for _, f := range []string{"sys/kernel/pid_max", "sys/kernel/threads-max"} {
		v, err := r.readUint(filepath.Join(procRoot, f), true)
		if err != nil || v > 1<<62 {
			continue
		}
		if maxPID == nil || int64(v) < *maxPID {
			n := int64(v)
			maxPID = &n
		}
	}
	b, err := r.readFile(filepath.Join(procRoot, "loadavg"), true)
	if err != nil {
		return maxPID, nil
	}
	var buf [6][]byte
	fields := appendFields(buf[:0], bytes.TrimSpace(b))
	if len(fields) < 5 {
		return maxPID, nil
	}
	_, total, ok := bytes.Cut(fields[3], []byte("/"))
	if !ok {
		return maxPID, nil
	}
	if n, err := strconv.ParseInt(string(total), 10, 64); err == nil {
		tasks = &n
	}
	return maxPID, tasks
}

// readNetDev parses a /proc/<pid>/net/dev file into the kubelet's network
// stats: every interface but the ignored ones, in file order, and the
// default interface (eth0) when present. t stamps the result. node says
// the file is the node's (reader.readFile), not a pod's.
func (r *reader) readNetDev(path string, node bool, t time.Time) (*statsapi.NetworkStats, error) {
	b, err := r.readFile(path, node)
	if err != nil {
		return nil, err
	}
	ns := &statsapi.NetworkStats{Time: metaTime(t)}
	lineNo := 0
	var perr error
	eachLine(b, func(line []byte) {
		lineNo++
		if lineNo <= 2 || perr != nil { // two header lines
			return
		}
		name, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			perr = fmt.Errorf("parse %s: unexpected line %q", path, line)
			return
		}
		var buf [16][]byte
		fields := appendFields(buf[:0], rest)
		if len(fields) != 16 {
			perr = fmt.Errorf("parse %s: unexpected line %q", path, line)
			return
		}
		iface := string(bytes.TrimSpace(name))
		for _, p := range ignoredInterfacePrefixes {
			if strings.HasPrefix(strings.ToLower(iface), p) {
				return
			}
		}
		var v [4]uint64 // rx bytes, rx errors, tx bytes, tx errors
		for i, col := range [4]int{0, 2, 8, 10} {
			n, err := strconv.ParseUint(string(fields[col]), 10, 64)
			if err != nil {
				perr = fmt.Errorf("parse %s: unexpected line %q", path, line)
				return
			}
			v[i] = n
		}
		is := statsapi.InterfaceStats{Name: iface, RxBytes: &v[0], RxErrors: &v[1], TxBytes: &v[2], TxErrors: &v[3]}
		if iface == defaultInterfaceName {
			ns.InterfaceStats = is
		}
		ns.Interfaces = append(ns.Interfaces, is)
	})
	if perr != nil {
		return nil, perr
	}
	return ns, nil
}
