package cluster

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
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

// TestNodeRootNetwork gives a NodeRoot a network namespace and a path the
// host lacks: a program listening inside is reached through Dial at the
// node's address, the host has neither the interface nor the path, and
// the extra path is an empty directory of the node's.
func TestNodeRootNetwork(t *testing.T) {
	if os.Geteuid() != 0 {
		requireOrSkip(t, errors.New("a mount and a network namespace need root"))
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		requireOrSkip(t, err)
	}
	missing := filepath.Join("/var/lib", "nodekit-node-root-probe-"+strconv.Itoa(os.Getpid()))
	root, err := NewNodeRootWith(t.Context(), NodeRootOptions{Dir: t.TempDir(), Paths: []string{missing}, Address: "10.250.0.10/24"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(root.Close)
	if root.Address != "10.250.0.10" {
		t.Errorf("Address %q, want 10.250.0.10", root.Address)
	}
	if _, err := net.InterfaceByName(NodeRootInterface); err == nil {
		t.Errorf("the host has the node's interface %s", NodeRootInterface)
	}

	// kubelet and etcd keep their paths; the extra one is the node's.
	argv := root.Command("/bin/sh", "-c", "set -e; ls -A "+missing+"; touch "+missing+"/probe; ls -d /var/lib/kubelet")
	if out, err := exec.CommandContext(t.Context(), argv[0], argv[1:]...).CombinedOutput(); err != nil || string(out) != "/var/lib/kubelet\n" {
		t.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the host's %s after the node wrote to it: %v, want it absent", missing, err)
	}
	if _, err := os.Stat(root.Path(missing + "/probe")); err != nil {
		t.Errorf("the node's %s: %v", missing, err)
	}

	argv = root.Command(busybox, "nc", "-l", "-p", "7777")
	server := exec.CommandContext(t.Context(), argv[0], argv[1:]...)
	server.Stdin = strings.NewReader("hello from the node\n")
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = server.Process.Kill()
		_ = server.Wait()
	})
	var (
		conn net.Conn
		last error
	)
	err = wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		conn, last = root.Dial(ctx, "tcp", "10.250.0.10:7777")
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("dial the node's 10.250.0.10:7777: %v (last: %v)", err, last)
	}
	defer conn.Close()
	got, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || got != "hello from the node\n" {
		t.Errorf("read %q, %v from the node; want its greeting", got, err)
	}
}
