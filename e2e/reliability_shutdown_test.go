package e2e

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// TestGracefulShutdownAndFiles runs three pods on containerd, then sends
// the agent SIGTERM: it must exit cleanly within its shutdown grace and
// leave every container running (as the kubelet without graceful node
// shutdown: stopping the agent is not stopping the node), and the agent
// started again must adopt them all without a restart. It also checks the
// modes of what the agent wrote under its root directory: its key and
// certificate 0600 in a 0700 directory, no file or directory writable by
// group or others, and its state directories closed to others (0750 as the
// kubelet's). It prints the stop time and the modes it found.
func TestGracefulShutdownAndFiles(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	ctx := t.Context()
	n := newRelNode(t, "sigterm", relOptions{})
	names := createPods(t, 3, "term", func(name string) *v1.Pod { return withGrace(n.pod(name, sleeper...), 2) })
	before := waitPods(t, n.ns, names, "Running and Ready", podTimeout, isPodReady)
	snap := snapshotContainers(before)

	if err := n.agent.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := n.agent.WaitExit(30 * time.Second); err != nil {
		t.Fatalf("the agent did not stop cleanly on SIGTERM: %v\n%s", err, cluster.LogTail(n.agent.LogPath, 30))
	}
	stopped := time.Since(start)
	for _, name := range names {
		uid := before[name].UID
		if cs := n.criContainers(t, uid, true); len(cs) != 1 {
			t.Errorf("pod %s has %d running containers after the agent stopped, want 1", name, len(cs))
		}
		if sbs := n.criSandboxes(t, uid); len(sbs) != 1 || sbs[0].State.String() != "SANDBOX_READY" {
			t.Errorf("pod %s has sandboxes %v after the agent stopped, want one ready", name, sbs)
		}
	}
	modes, problems := checkModes(filepath.Join(n.agent.Dir, "root"))
	for _, p := range problems {
		t.Error(p)
	}

	restart := time.Now()
	if err := n.agent.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitForNode(t, n.name, "Ready after the restart", readyTimeout, func(node *v1.Node) bool {
		c := readyCondition(node)
		// Heartbeats have whole seconds.
		return c.Status == v1.ConditionTrue && !c.LastHeartbeatTime.Time.Before(restart.Truncate(time.Second))
	})
	after := waitPods(t, n.ns, names, "Running and Ready after the restart", podTimeout, isPodReady)
	if changed := compareContainers(snap, after); len(changed) > 0 {
		t.Errorf("%d containers restarted or replaced across the agent's stop:\n  %s", len(changed), strings.Join(changed, "\n  "))
	}
	t.Logf("SIGTERM: the agent exited cleanly in %s and left %d containers running; restarted, it adopted them all (0 restarted); modes under its root: %s",
		stopped.Round(10*time.Millisecond), len(snap), modes)
}

// checkModes walks the agent's root directory and returns a summary of the
// modes found (mode → count, by kind) and the problems: a private key or
// certificate not 0600, its directory not 0700, anything writable by group
// or others, a directory that others may enter.
func checkModes(root string) (string, []string) {
	counts := map[string]int{}
	var problems []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode()&os.ModeSymlink != 0 {
			return nil
		}
		perm := info.Mode().Perm()
		kind := "file"
		if d.IsDir() {
			kind = "dir"
		}
		rel, _ := filepath.Rel(root, path)
		// What containers see of the pod directories (volumes, etc-hosts)
		// is the pods' business: check only the agent's own entries there.
		if strings.Count(rel, string(filepath.Separator)) > 2 && strings.HasPrefix(rel, "pods"+string(filepath.Separator)) {
			return nil
		}
		counts[fmt.Sprintf("%s %04o", kind, perm)]++
		switch {
		case strings.HasSuffix(path, ".key") || strings.HasSuffix(path, ".crt") || strings.HasSuffix(path, ".pem"):
			if perm != 0o600 {
				problems = append(problems, fmt.Sprintf("%s has mode %04o, want 0600", path, perm))
			}
			if dir, err := os.Stat(filepath.Dir(path)); err == nil && dir.Mode().Perm() != 0o700 {
				problems = append(problems, fmt.Sprintf("%s (holding %s) has mode %04o, want 0700", filepath.Dir(path), d.Name(), dir.Mode().Perm()))
			}
		case perm&0o022 != 0:
			problems = append(problems, fmt.Sprintf("%s %s has mode %04o: writable by group or others", kind, path, perm))
		case d.IsDir() && perm&0o007 != 0:
			problems = append(problems, fmt.Sprintf("directory %s has mode %04o: open to others", path, perm))
		}
		return nil
	})
	if err != nil {
		problems = append(problems, fmt.Sprintf("walk %s: %v", root, err))
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, counts[k]))
	}
	return strings.Join(parts, ", "), problems
}
