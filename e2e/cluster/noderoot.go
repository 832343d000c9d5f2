package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"
)

// NodeRootPaths are the fixed host paths kubeadm and the kubelet use that a
// NodeRoot replaces with directories of its own.
var NodeRootPaths = []string{"/etc/kubernetes", "/var/lib/kubelet"}

// NodeRoot is a private mount namespace in which /etc/kubernetes and
// /var/lib/kubelet (NodeRootPaths) are empty directories under Dir, so that
// programs with those paths built in — kubeadm, and a kubelet started as
// kubeadm's systemd drop-in starts it — set up a node without touching the
// host's, and several such nodes run side by side. Everything else (the
// rest of the file system, the network, the processes) is the host's; the
// namespace's mounts, and those its programs make (pod volumes under
// /var/lib/kubelet), never reach the host and go with the namespace.
// NewNodeRootWith covers more paths and can give the node a network
// namespace of its own.
//
// Where a path does not exist on the host, its parent is covered inside
// the namespace with an overlay whose upper layer is under Dir, in which
// the mount point is made, so the host's /etc and /var/lib stay as they
// are. Programs enter the namespace through Command (nsenter).
type NodeRoot struct {
	// Dir holds the namespace's directories: Dir/etc/kubernetes is
	// /etc/kubernetes inside it, Dir/var/lib/kubelet is /var/lib/kubelet.
	Dir string
	// Address is the node's address in its own network namespace
	// (NodeRootOptions.Address without the prefix length); empty when it
	// shares the host's network.
	Address string

	holder  *process
	nsenter string
	netns   bool
}

// NodeRootOptions configure NewNodeRootWith.
type NodeRootOptions struct {
	// Dir holds the namespace's directories (created if missing).
	// Required.
	Dir string
	// Paths are host directories covered beside NodeRootPaths, such as
	// /var/lib/etcd.
	Paths []string
	// Address, an IPv4 address with its prefix length ("10.250.0.10/24"),
	// gives the node a network namespace of its own: the loopback
	// interface up, a veth pair, both ends in the namespace, one holding
	// Address, and IPv4 forwarding on. There is no default route, so names the host's
	// resolver would look up fail at once instead of timing out. The
	// namespace, its interfaces and whatever listens in it go with the
	// last process in it; Dial reaches it from the host's network.
	Address string
}

// NodeRootInterface is the network interface that holds
// NodeRootOptions.Address in the node's network namespace.
const NodeRootInterface = "nk0"

// NewNodeRoot makes the namespace, with its directories under dir (created
// if missing), held by a sleeping process until Close. It needs root and
// util-linux's unshare, nsenter and mount.
func NewNodeRoot(ctx context.Context, dir string) (*NodeRoot, error) {
	return NewNodeRootWith(ctx, NodeRootOptions{Dir: dir})
}

// NewNodeRootWith is NewNodeRoot with more covered paths and, with
// opts.Address, a network namespace (which also needs iproute2's ip).
func NewNodeRootWith(ctx context.Context, opts NodeRootOptions) (_ *NodeRoot, err error) {
	tools := map[string]string{}
	needed := []string{"unshare", "nsenter", "mount", "sleep"}
	if opts.Address != "" {
		needed = append(needed, "ip")
	}
	for _, name := range needed {
		if tools[name], err = exec.LookPath(name); err != nil {
			return nil, fmt.Errorf("node root: %w", err)
		}
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("node root: %w", err)
	}
	r := &NodeRoot{Dir: dir, nsenter: tools["nsenter"], netns: opts.Address != ""}
	ready := filepath.Join(dir, ".ready")
	cover, err := coverScript(dir, tools["mount"], append(slices.Clone(NodeRootPaths), opts.Paths...))
	if err != nil {
		return nil, fmt.Errorf("node root: %w", err)
	}
	script := append([]string{"set -e"}, cover...)
	unshare := []string{"--mount", "--propagation", "private"}
	if r.netns {
		prefix, err := netip.ParsePrefix(opts.Address)
		if err != nil || !prefix.Addr().Is4() {
			return nil, fmt.Errorf("node root: address %q: want an IPv4 address with its prefix length", opts.Address)
		}
		r.Address = prefix.Addr().String()
		ip := tools["ip"]
		unshare = append(unshare, "--net")
		script = append(script,
			ip+" link set lo up",
			fmt.Sprintf("%s link add %s type veth peer name %s-peer", ip, NodeRootInterface, NodeRootInterface),
			fmt.Sprintf("%s link set %s-peer up", ip, NodeRootInterface),
			fmt.Sprintf("%s address add %s dev %s", ip, prefix, NodeRootInterface),
			fmt.Sprintf("%s link set %s up", ip, NodeRootInterface),
			// Per network namespace, off in a new one; kubeadm's preflight
			// requires it, as of every node.
			"echo 1 > /proc/sys/net/ipv4/ip_forward")
	}
	script = append(script, "touch "+ready, "exec "+tools["sleep"]+" infinity")
	r.holder, err = startProcess("node root "+dir, filepath.Join(dir, "node-root.log"), tools["unshare"],
		append(unshare, "--", "/bin/sh", "-c", strings.Join(script, "\n")), nil)
	if err != nil {
		return nil, fmt.Errorf("node root: %w", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		if r.holder.exited() {
			return false, r.holder.exitErr()
		}
		_, err := os.Stat(ready)
		return err == nil, nil
	})
	if err != nil {
		r.holder.kill()
		return nil, fmt.Errorf("node root %s: %w\n--- %s:\n%s", dir, err, r.holder.logPath, LogTail(r.holder.logPath, 20))
	}
	return r, nil
}

// Path is where p, a path under one of NodeRootPaths inside the namespace,
// is on the host.
func (r *NodeRoot) Path(p string) string {
	return coveredPath(r.Dir, p)
}

// coveredPath is where coverScript keeps p's content: under dir.
func coveredPath(dir, p string) string {
	return filepath.Join(dir, filepath.FromSlash(p))
}

// coverScript returns the shell lines that, run in a new mount namespace,
// cover each of paths with an empty directory of its own under dir
// (coveredPath, created here). Where a path does not exist on the host, its
// parent is covered with an overlay whose upper layer is under dir, in
// which the mount point is made, so the host's directories stay as they
// are; the overlays come first (one per parent), so that none hides
// another path's directory. First the mount that holds each path (or its
// parent) is made private in the namespace, so that none of these mounts
// reaches the host even when the namespace's mounts started as peers of
// the host's (unshare --propagation unchanged on a host whose / is
// shared).
func coverScript(dir, mount string, paths []string) ([]string, error) {
	var overlays, binds []string
	overlaid := map[string]bool{}
	for _, p := range paths {
		src := coveredPath(dir, p)
		if err := os.MkdirAll(src, 0o755); err != nil {
			return nil, err
		}
		if _, err := os.Stat(p); err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
			parent := filepath.Dir(p)
			if !overlaid[parent] {
				overlaid[parent] = true
				upper := filepath.Join(dir, ".overlay", strings.ReplaceAll(strings.Trim(parent, "/"), "/", "-"))
				for _, d := range []string{"upper", "work"} {
					if err := os.MkdirAll(filepath.Join(upper, d), 0o755); err != nil {
						return nil, err
					}
				}
				overlays = append(overlays,
					fmt.Sprintf(`%s --make-private "$(findmnt -n -o TARGET --target %s)"`, mount, parent),
					fmt.Sprintf("%s -t overlay nodekit-node-root -o lowerdir=%s,upperdir=%s,workdir=%s %s",
						mount, parent, filepath.Join(upper, "upper"), filepath.Join(upper, "work"), parent))
			}
			binds = append(binds, "mkdir -p "+p)
		} else {
			binds = append(binds, fmt.Sprintf(`%s --make-private "$(findmnt -n -o TARGET --target %s)"`, mount, p))
		}
		binds = append(binds, fmt.Sprintf("%s --bind %s %s", mount, src, p))
	}
	return append(overlays, binds...), nil
}

// Command returns argv run inside the namespace: nsenter, which enters it
// (its mount namespace, and its network namespace if it has one) and
// executes argv[0] in its own place (same process, so signals reach the
// program).
func (r *NodeRoot) Command(argv ...string) []string {
	ns := "/proc/" + strconv.Itoa(r.holder.pid()) + "/ns/"
	cmd := []string{r.nsenter, "--mount=" + ns + "mnt"}
	if r.netns {
		cmd = append(cmd, "--net="+ns+"net")
	}
	return append(append(cmd, "--"), argv...)
}

// Dial connects to address in the node's network namespace (the host's
// network when it has none), for clients of what listens there (an HTTP
// transport's DialContext, a rest.Config's Dial): the socket is made by an
// OS thread that entered the namespace, and keeps to it.
func (r *NodeRoot) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	if !r.netns {
		var d net.Dialer
		return d.DialContext(ctx, network, address)
	}
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		// The thread is never unlocked: it ends with this goroutine, so
		// no other goroutine runs in the namespace.
		runtime.LockOSThread()
		ns, err := os.Open("/proc/" + strconv.Itoa(r.holder.pid()) + "/ns/net")
		if err != nil {
			done <- result{err: fmt.Errorf("dial %s in node root %s: %w", address, r.Dir, err)}
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("dial %s in node root %s: enter its network namespace: %w", address, r.Dir, err)}
			return
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, address)
		done <- result{conn, err}
	}()
	res := <-done
	return res.conn, res.err
}

// Close ends the process holding the namespace; the namespace and its
// mounts go once no program runs in it any more. Dir is left to the
// caller.
func (r *NodeRoot) Close() {
	r.holder.kill()
}
