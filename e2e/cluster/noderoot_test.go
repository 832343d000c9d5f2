package cluster

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNodeRootIsPrivate runs a program in a NodeRoot that writes to
// /etc/kubernetes and mounts a tmpfs under /var/lib/kubelet: the file lands
// under Dir and not in the host's /etc/kubernetes, /var/lib/kubelet starts
// empty whatever the host's holds, and the mount stays in the namespace.
func TestNodeRootIsPrivate(t *testing.T) {
	if os.Geteuid() != 0 {
		requireOrSkip(t, errors.New("a mount namespace needs root"))
	}
	root, err := NewNodeRoot(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(root.Close)
	hostHad := map[string]bool{}
	for _, p := range NodeRootPaths {
		_, err := os.Stat(filepath.Join(p, "nodekit-node-root-probe"))
		hostHad[p] = err == nil
	}

	script := `set -e
ls -A /var/lib/kubelet
echo probe > /etc/kubernetes/nodekit-node-root-probe
mkdir /var/lib/kubelet/nodekit-node-root-probe
mount -t tmpfs nodekit-node-root-probe /var/lib/kubelet/nodekit-node-root-probe
echo inside > /var/lib/kubelet/nodekit-node-root-probe/file`
	argv := root.Command("/bin/sh", "-c", script)
	out, err := exec.CommandContext(t.Context(), argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	if len(out) != 0 {
		t.Errorf("/var/lib/kubelet in a new node root holds %q, want nothing", out)
	}
	if data, err := os.ReadFile(root.Path("/etc/kubernetes/nodekit-node-root-probe")); err != nil || string(data) != "probe\n" {
		t.Errorf("the file written to /etc/kubernetes inside: %q, %v; want it under %s", data, err, root.Dir)
	}
	for _, p := range NodeRootPaths {
		if _, err := os.Stat(filepath.Join(p, "nodekit-node-root-probe")); err == nil && !hostHad[p] {
			t.Errorf("the host's %s got the probe written inside the node root", p)
		}
	}
	// The tmpfs is the namespace's: on the host the directory is empty.
	entries, err := os.ReadDir(root.Path("/var/lib/kubelet/nodekit-node-root-probe"))
	if err != nil || len(entries) != 0 {
		t.Errorf("the host sees %v (%v) in the directory mounted over inside, want it empty", entries, err)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), "nodekit-node-root") {
		t.Errorf("the node root's mounts reached the host:\n%s", mounts)
	}
}
