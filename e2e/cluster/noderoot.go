package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

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
//
// Where a path does not exist on the host, its parent is covered inside
// the namespace with an overlay whose upper layer is under Dir, in which
// the mount point is made, so the host's /etc and /var/lib stay as they
// are. Programs enter the namespace through Command (nsenter).
type NodeRoot struct {
	// Dir holds the namespace's directories: Dir/etc/kubernetes is
	// /etc/kubernetes inside it, Dir/var/lib/kubelet is /var/lib/kubelet.
	Dir string

	holder  *process
	nsenter string
}

// NewNodeRoot makes the namespace, with its directories under dir (created
// if missing), held by a sleeping process until Close. It needs root and
// util-linux's unshare, nsenter and mount.
func NewNodeRoot(ctx context.Context, dir string) (_ *NodeRoot, err error) {
	tools := map[string]string{}
	for _, name := range []string{"unshare", "nsenter", "mount", "sleep"} {
		if tools[name], err = exec.LookPath(name); err != nil {
			return nil, fmt.Errorf("node root: %w", err)
		}
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, fmt.Errorf("node root: %w", err)
	}
	r := &NodeRoot{Dir: dir, nsenter: tools["nsenter"]}
	ready := filepath.Join(dir, ".ready")
	cover, err := coverScript(dir, tools["mount"], NodeRootPaths)
	if err != nil {
		return nil, fmt.Errorf("node root: %w", err)
	}
	script := append([]string{"set -e"}, cover...)
	script = append(script, "touch "+ready, "exec "+tools["sleep"]+" infinity")
	r.holder, err = startProcess("node root "+dir, filepath.Join(dir, "node-root.log"), tools["unshare"],
		[]string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c", strings.Join(script, "\n")}, nil)
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
// are. First the mount that holds each path (or its parent) is made private
// in the namespace, so that none of these mounts reaches the host even
// when the namespace's mounts started as peers of the host's (unshare
// --propagation unchanged on a host whose / is shared).
func coverScript(dir, mount string, paths []string) ([]string, error) {
	var script []string
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
			upper := filepath.Join(dir, ".overlay", strings.ReplaceAll(strings.Trim(parent, "/"), "/", "-"))
			for _, d := range []string{"upper", "work"} {
				if err := os.MkdirAll(filepath.Join(upper, d), 0o755); err != nil {
					return nil, err
				}
			}
			script = append(script,
				fmt.Sprintf(`%s --make-private "$(findmnt -n -o TARGET --target %s)"`, mount, parent),
				fmt.Sprintf("%s -t overlay nodekit-node-root -o lowerdir=%s,upperdir=%s,workdir=%s %s",
					mount, parent, filepath.Join(upper, "upper"), filepath.Join(upper, "work"), parent),
				"mkdir -p "+p)
		} else {
			script = append(script, fmt.Sprintf(`%s --make-private "$(findmnt -n -o TARGET --target %s)"`, mount, p))
		}
		script = append(script, fmt.Sprintf("%s --bind %s %s", mount, src, p))
	}
	return script, nil
}

// Command returns argv run inside the namespace: nsenter, which enters it
// and executes argv[0] in its own place (same process, so signals reach
// the program).
func (r *NodeRoot) Command(argv ...string) []string {
	return append([]string{r.nsenter, "--mount=/proc/" + strconv.Itoa(r.holder.pid()) + "/ns/mnt", "--"}, argv...)
}

// Close ends the process holding the namespace; the namespace and its
// mounts go once no program runs in it any more. Dir is left to the
// caller.
func (r *NodeRoot) Close() {
	r.holder.kill()
}
