package e2e

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// hostPaths is what exists under the host's node paths
// (cluster.NodeRootPaths: /etc/kubernetes, /var/lib/kubelet), by path, with
// each entry's modification time.
type hostPaths map[string]time.Time

// snapshotHostPaths records the host's node paths. The suite's nodes keep
// their state in their own directories (a kubelet with built-in host paths
// runs in a mount namespace, kubeadm in a NodeRoot), so a run must leave
// these paths as it found them.
func snapshotHostPaths() (hostPaths, error) {
	snap := hostPaths{}
	for _, root := range cluster.NodeRootPaths {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			info, err := d.Info()
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			snap[path] = info.ModTime()
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return snap, nil
}

// changedSince lists what was created, modified or removed under the host's
// node paths since before.
func (before hostPaths) changedSince(after hostPaths) []string {
	var changed []string
	for path, mtime := range after {
		if was, ok := before[path]; !ok {
			changed = append(changed, path+" (created)")
		} else if !was.Equal(mtime) {
			changed = append(changed, path+" (modified)")
		}
	}
	for path := range before {
		if _, ok := after[path]; !ok {
			changed = append(changed, path+" (removed)")
		}
	}
	slices.Sort(changed)
	return changed
}

// checkHostPaths fails the run when it changed the host's node paths.
func checkHostPaths(before hostPaths) error {
	after, err := snapshotHostPaths()
	if err != nil {
		return err
	}
	if changed := before.changedSince(after); len(changed) > 0 {
		return fmt.Errorf("the run wrote to the host's %s, which belong to the host's own kubelet: %s",
			strings.Join(cluster.NodeRootPaths, " and "), strings.Join(changed, ", "))
	}
	return nil
}

func TestHostPathsChangedSince(t *testing.T) {
	t0 := time.Unix(100, 0)
	before := hostPaths{"/var/lib/kubelet": t0, "/var/lib/kubelet/pki": t0, "/etc/kubernetes/gone": t0}
	after := hostPaths{"/var/lib/kubelet": t0.Add(time.Second), "/var/lib/kubelet/pki": t0,
		"/var/lib/kubelet/device-plugins/kubelet.sock": t0}
	got := before.changedSince(after)
	want := []string{"/etc/kubernetes/gone (removed)", "/var/lib/kubelet (modified)", "/var/lib/kubelet/device-plugins/kubelet.sock (created)"}
	if !slices.Equal(got, want) {
		t.Errorf("changedSince = %q, want %q", got, want)
	}
	if got := before.changedSince(before); len(got) != 0 {
		t.Errorf("changedSince(itself) = %q, want nothing", got)
	}
}
