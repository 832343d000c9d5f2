package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// Agent names a node agent the tests run against.
type Agent string

// The node agents Run compares.
const (
	// Nodekit is nodekit's agent, examples/nodeagent.
	Nodekit Agent = "nodekit"
	// Kubelet is the upstream kubelet at the pinned version.
	Kubelet Agent = "kubelet"
)

// repoPath is the repository prefix, on the run's loopback registry, that
// KUBE_TEST_REPO_LIST renames the framework's registries into.
const repoPath = "e2e"

// Options configure Run.
type Options struct {
	// Focus and Skip are ginkgo's --focus and --skip regular expressions.
	// Focus is required.
	Focus, Skip string
	// Agents are the node agents to run the focus against, one after the
	// other; nil means Nodekit then Kubelet.
	Agents []Agent
	// Procs is the number of parallel ginkgo processes (default 1). Specs
	// marked [Serial] run alone at the end either way.
	Procs int
	// Timeout bounds each agent's ginkgo run (ginkgo --timeout: the specs
	// not started by then are reported skipped); a ginkgo still running
	// 3 minutes past it is killed and Run fails. Default 2 hours.
	Timeout time.Duration
	// Dir keeps the state and logs of the run: the control plane, each
	// agent's containerd, node and report. Required.
	Dir string
	// Source is the checkout; zero means cluster.LocateSource().
	Source cluster.Source
	// Log receives progress; nil discards it.
	Log io.Writer
}

// Run builds (or takes from the cache) the control plane, upstream's
// e2e.test and ginkgo, the node agents and the test images; starts a
// control plane and a registry on loopback serving the test images under the
// names the framework uses after KUBE_TEST_REPO_LIST renames its registries
// into it (a pod pulling with policy Always is served as upstream's
// registry serves it); and for each agent in turn starts a fresh containerd
// with the test images also imported (the others are not pulled), one node
// on it run by the
// agent, and runs ginkgo with e2e.test and the focus against that single
// node, then stops the node, deletes it and removes the containerd. It
// returns the tests' results per agent; a test failing is not an error,
// failing to run the suite is.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if opts.Focus == "" || opts.Dir == "" {
		return nil, errors.New("conformance: Focus and Dir are required")
	}
	if opts.Agents == nil {
		opts.Agents = []Agent{Nodekit, Kubelet}
	}
	for _, a := range opts.Agents {
		if a != Nodekit && a != Kubelet {
			return nil, fmt.Errorf("conformance: unknown agent %q (want %s or %s)", a, Nodekit, Kubelet)
		}
	}
	if opts.Procs <= 0 {
		opts.Procs = 1
	}
	if opts.Timeout == 0 {
		opts.Timeout = 2 * time.Hour
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.Source == (cluster.Source{}) {
		src, err := cluster.LocateSource()
		if err != nil {
			return nil, err
		}
		opts.Source = src
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	r := &runner{opts: opts, dir: dir}
	return r.run(ctx)
}

type runner struct {
	opts     Options
	dir      string
	cp       *cluster.ControlPlane
	bins     cluster.ConformanceBinaries
	agent    string // nodekit's agent binary
	kubelet  string // the kubelet binary
	registry *localRegistry
	repoList string
	images   []string // archives to import
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.opts.Log, "conformance: "+format+"\n", args...)
}

func (r *runner) run(ctx context.Context) (_ *Report, err error) {
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, err
	}
	build := cluster.BuildOptions{Source: r.opts.Source, Log: r.opts.Log}
	start := time.Now()
	cpBins, err := cluster.BuildControlPlane(ctx, build)
	if err != nil {
		return nil, fmt.Errorf("conformance: %w", err)
	}
	if r.bins, err = cluster.BuildConformance(ctx, build); err != nil {
		return nil, fmt.Errorf("conformance: %w", err)
	}
	binDir := filepath.Join(r.dir, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return nil, err
	}
	if slices.Contains(r.opts.Agents, Nodekit) {
		if r.agent, err = cluster.BuildAgent(ctx, r.opts.Source, binDir, r.opts.Log); err != nil {
			return nil, fmt.Errorf("conformance: %w", err)
		}
	}
	if slices.Contains(r.opts.Agents, Kubelet) {
		if r.kubelet, err = cluster.BuildKubelet(ctx, build); err != nil {
			return nil, fmt.Errorf("conformance: %w", err)
		}
	}
	r.logf("binaries ready in %s", time.Since(start).Round(time.Second))
	blobs := filepath.Join(r.dir, "registry")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return nil, err
	}
	if r.registry, err = startRegistry(blobs); err != nil {
		return nil, fmt.Errorf("conformance: %w", err)
	}
	defer func() { err = errors.Join(err, r.registry.close()) }()
	if err := r.buildImages(ctx); err != nil {
		return nil, fmt.Errorf("conformance: %w", err)
	}

	r.cp, err = cluster.StartControlPlane(ctx, cluster.ControlPlaneOptions{
		Binaries: cpBins, Dir: filepath.Join(r.dir, "controlplane"), Log: r.opts.Log,
	})
	if err != nil {
		return nil, fmt.Errorf("conformance: %w", err)
	}
	defer func() { err = errors.Join(err, r.cp.Stop()) }()

	report := &Report{KubernetesVersion: r.bins.KubernetesVersion, Focus: r.opts.Focus, Skip: r.opts.Skip}
	for _, a := range r.opts.Agents {
		res, err := r.runAgent(ctx, a)
		if err != nil {
			return report, fmt.Errorf("conformance: %s: %w", a, err)
		}
		report.Results = append(report.Results, res)
		r.logf("%s: %d passed, %d failed, %d skipped in %s", a, res.Count(Passed), res.Count(Failed), res.Count(Skipped), res.Duration.Round(time.Second))
	}
	return report, nil
}

// repoList is KUBE_TEST_REPO_LIST: every registry the framework pulls from
// renamed into prefix, except the invalid and the private (authenticated)
// registries, whose tests expect a pull to fail or need credentials.
func repoList(prefix string) map[string]string {
	return map[string]string{
		"promoterE2eRegistry":      prefix,
		"buildImageRegistry":       prefix + "/build-image",
		"gcEtcdRegistry":           prefix,
		"gcRegistry":               prefix,
		"sigStorageRegistry":       prefix + "/sig-storage",
		"dockerLibraryRegistry":    prefix + "/library",
		"cloudProviderGcpRegistry": prefix + "/cloud-provider-gcp",
	}
}

// buildImages writes the repo list, builds every image the framework names
// (e2e.test --list-images) that cluster.BuildTestImage can build and
// pushes it to the run's registry.
func (r *runner) buildImages(ctx context.Context) error {
	prefix := r.registry.host + "/" + repoPath
	data, err := yaml.Marshal(repoList(prefix))
	if err != nil {
		return err
	}
	r.repoList = filepath.Join(r.dir, "repo-list.yaml")
	if err := os.WriteFile(r.repoList, data, 0o644); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, r.bins.E2ETest, "--list-images")
	cmd.Env = append(os.Environ(), "KUBE_TEST_REPO_LIST="+r.repoList)
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("list the test images (%s --list-images): %w", r.bins.E2ETest, err)
	}
	dir := filepath.Join(r.dir, "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var built, missing []string
	for _, ref := range strings.Fields(string(out)) {
		if !strings.HasPrefix(ref, prefix+"/") {
			continue
		}
		archive, err := cluster.BuildTestImage(ctx, r.opts.Source, r.bins, ref, dir, r.opts.Log)
		if errors.Is(err, cluster.ErrNoLocalTestImage) {
			missing = append(missing, ref)
			continue
		}
		if err != nil {
			return err
		}
		if err := r.registry.push(ctx, archive, ref); err != nil {
			return err
		}
		r.images = append(r.images, archive)
		built = append(built, ref)
	}
	r.logf("built %d test images: %s", len(built), strings.Join(built, " "))
	r.logf("%d images of the framework are not built here (their tests fail on every agent): %s", len(missing), strings.Join(missing, " "))
	return nil
}

// runAgent runs the focus against one fresh node of agent a.
func (r *runner) runAgent(ctx context.Context, a Agent) (_ *Result, err error) {
	dir := filepath.Join(r.dir, string(a))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// Teardown, in the order added: stop the node, delete its Node,
	// remove containerd's pods and the daemon, unmount what the node left,
	// remove its cgroup, restore the host.
	var teardown teardownList
	defer func() { err = errors.Join(err, teardown.run()) }()
	var node *cluster.Agent
	nodeName := "conformance-" + string(a)
	// The kubelet refuses a loopback node IP (it then reports no address,
	// and the API server cannot reach it for logs and exec): both agents
	// take the host's address.
	nodeIP, err := hostIP()
	if err != nil {
		return nil, err
	}
	teardown.add(func() error {
		if node == nil {
			return nil
		}
		// The kubelet may exit non-zero on SIGTERM; only a kill is an
		// error worth reporting for it.
		if err := node.Stop(); err != nil && (a == Nodekit || cluster.StopTimedOut(err)) {
			return fmt.Errorf("stop %s: %w", a, err)
		}
		return nil
	})
	teardown.add(func() error {
		if node == nil {
			return nil
		}
		err := r.cp.Client().CoreV1().Nodes().Delete(context.WithoutCancel(ctx), nodeName, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete node %s: %w", nodeName, err)
		}
		return nil
	})
	ctrd, err := cluster.StartContainerd(ctx, cluster.ContainerdOptions{
		Source: r.opts.Source, Dir: filepath.Join(dir, "containerd"), Log: r.opts.Log,
	})
	if err != nil {
		return nil, err
	}
	teardown.add(func() error { return ctrd.Close(context.WithoutCancel(ctx)) })
	teardown.add(func() error {
		if node == nil {
			return nil
		}
		return node.UnmountVolumes()
	})
	for _, img := range r.images {
		if err := ctrd.ImportImage(ctx, img); err != nil {
			return nil, err
		}
	}
	cgroup := fmt.Sprintf("nodekit-conformance-%d-%s", os.Getpid(), a)
	removeCgroup, err := cluster.CreateCgroup(cgroup)
	if err != nil {
		return nil, err
	}
	teardown.add(removeCgroup)

	switch a {
	case Nodekit:
		node, err = r.cp.NewAgent(cluster.AgentOptions{
			Binary: r.agent, NodeName: nodeName, NodeIP: nodeIP, RuntimeEndpoint: ctrd.Endpoint, CgroupDriver: "cgroupfs",
			ExtraArgs: []string{"--cgroup-root=/" + cgroup},
		})
	case Kubelet:
		// The kubelet sets kernel tunables and links container logs into
		// /var/log/containers; put the host back as it was.
		saved, serr := cluster.SaveKernelTunables()
		if serr != nil {
			return nil, serr
		}
		teardown.add(saved.Restore)
		links, lerr := filepath.Glob(filepath.Join(cluster.ContainerLogLinks, "*.log"))
		if lerr != nil {
			return nil, lerr
		}
		_, statErr := os.Stat(cluster.ContainerLogLinks)
		teardown.add(func() error { return removeNewLogLinks(links, statErr != nil) })
		node, err = r.cp.NewKubelet(cluster.KubeletOptions{
			Binary: r.kubelet, NodeName: nodeName, NodeIP: nodeIP, RuntimeEndpoint: ctrd.Endpoint, CgroupRoot: "/" + cgroup,
		})
	}
	if err != nil {
		return nil, err
	}
	if err := node.Start(ctx); err != nil {
		return nil, err
	}
	if err := r.waitNodeReady(ctx, nodeName); err != nil {
		return nil, fmt.Errorf("%w\n--- last lines of %s:\n%s", err, node.LogPath, cluster.LogTail(node.LogPath, 30))
	}
	r.logf("%s: node %s Ready (log %s); running e2e.test", a, nodeName, node.LogPath)
	return r.ginkgo(ctx, a, dir, node)
}

// hostIP returns the host's address on its default route (no packet is
// sent: connecting a UDP socket only picks the route).
func hostIP() (string, error) {
	conn, err := net.Dial("udp4", "198.51.100.1:9")
	if err != nil {
		return "", fmt.Errorf("find the host's address for the node (a default route is needed: the kubelet refuses a loopback node IP): %w", err)
	}
	defer conn.Close()
	return conn.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

// teardownList runs cleanups in the order they were added, all of them,
// joining their errors.
type teardownList []func() error

func (t *teardownList) add(f func() error) { *t = append(*t, f) }

func (t teardownList) run() error {
	var errs []error
	for _, f := range t {
		errs = append(errs, f())
	}
	return errors.Join(errs...)
}

// waitNodeReady waits up to two minutes for the node to be Ready.
func (r *runner) waitNodeReady(ctx context.Context, name string) error {
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := r.cp.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		for _, c := range n.Status.Conditions {
			if c.Type == v1.NodeReady {
				return c.Status == v1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready: %w", name, err)
	}
	return nil
}

// ginkgo runs e2e.test through the ginkgo CLI against the cluster's one
// node and parses its JUnit report.
func (r *runner) ginkgo(ctx context.Context, a Agent, dir string, node *cluster.Agent) (*Result, error) {
	reportDir := filepath.Join(dir, "report")
	if err := os.MkdirAll(reportDir, 0o755); err != nil {
		return nil, err
	}
	args := []string{
		"--procs=" + strconv.Itoa(r.opts.Procs),
		"--focus=" + r.opts.Focus,
		"--timeout=" + r.opts.Timeout.String(),
		"--no-color",
		"--silence-skips",
	}
	if r.opts.Skip != "" {
		args = append(args, "--skip="+r.opts.Skip)
	}
	args = append(args, r.bins.E2ETest, "--")
	args = append(args, e2eFlags(r.cp.AdminKubeconfig, r.cp.Binaries.Kubectl, r.bins.Source, reportDir, node)...)
	logPath := filepath.Join(dir, "e2e.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	// ginkgo ends the suite at --timeout itself, then runs the cleanups of
	// the interrupted specs (each bounded by its grace period) and writes
	// the report. A run still going well past that is killed, so a bound
	// given to the runner holds (the machine's e2e lock is shared).
	bounded, cancel := context.WithTimeout(ctx, r.opts.Timeout+ginkgoOverrun)
	defer cancel()
	cmd := exec.CommandContext(bounded, r.bins.Ginkgo, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "KUBE_TEST_REPO_LIST="+r.repoList)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// ginkgo and its e2e.test processes form a group, killed together.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	fmt.Fprintf(logFile, "KUBE_TEST_REPO_LIST=%s %s %s\n", r.repoList, r.bins.Ginkgo, strings.Join(args, " "))
	start := time.Now()
	runErr := cmd.Run() // non-zero when a test failed: the report says which
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if runErr != nil && bounded.Err() != nil {
		return nil, fmt.Errorf("ginkgo ran %s past its timeout %s and was killed (log %s)", ginkgoOverrun, r.opts.Timeout, logPath)
	}
	res := &Result{Agent: a, Duration: time.Since(start), Dir: dir}
	f, err := os.Open(filepath.Join(reportDir, "junit_01.xml"))
	if err != nil {
		return nil, fmt.Errorf("e2e.test wrote no report (%v): %w\n--- last lines of %s:\n%s", runErr, err, logPath, cluster.LogTail(logPath, 30))
	}
	defer f.Close()
	if res.Cases, err = parseJUnit(f); err != nil {
		return nil, err
	}
	return res, nil
}

// ginkgoOverrun is how long ginkgo may run past its --timeout (the
// interrupted specs' cleanups, the report) before it is killed.
const ginkgoOverrun = 3 * time.Minute

// e2eFlags are e2e.test's flags for a cluster of one node that runs no
// system pods: the admin kubeconfig, the skeleton provider, one node, no
// wait for kube-system pods, kubectl and the Kubernetes source (for the
// manifests a few tests read), the report directory, the node's runtime and
// root directory, and no log dump from nodes (there is no SSH).
func e2eFlags(kubeconfig, kubectl, source, reportDir string, node *cluster.Agent) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--provider=skeleton",
		"--num-nodes=1",
		"--node-os-distro=debian",
		"--allowed-not-ready-nodes=0",
		"--minStartupPods=0",
		"--system-pods-startup-timeout=1m",
		"--e2e-verify-service-account=true",
		"--kubectl-path=" + kubectl,
		"--repo-root=" + source,
		"--report-dir=" + reportDir,
		"--e2e-output-dir=" + reportDir,
		"--disable-log-dump=true",
		"--kubelet-root-dir=" + filepath.Join(node.Dir, "root"),
	}
}

// removeNewLogLinks removes the links in cluster.ContainerLogLinks that are
// not in before, and the directory if it did not exist and is now empty.
func removeNewLogLinks(before []string, removeDir bool) error {
	now, err := filepath.Glob(filepath.Join(cluster.ContainerLogLinks, "*.log"))
	if err != nil {
		return err
	}
	var errs []error
	for _, l := range now {
		if !slices.Contains(before, l) {
			if err := os.Remove(l); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if removeDir {
		if entries, err := os.ReadDir(cluster.ContainerLogLinks); err == nil && len(entries) == 0 {
			errs = append(errs, os.Remove(cluster.ContainerLogLinks))
		}
	}
	return errors.Join(errs...)
}

// SigNodeConformance is the focus of every [sig-node] test tagged
// [Conformance], the node's part of what Kubernetes certifies.
const SigNodeConformance = `\[sig-node\].*\[Conformance\]`
