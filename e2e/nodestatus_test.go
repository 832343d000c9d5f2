package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// containerdNodeStatusTests are the node status tests of issue 5 that need
// a real runtime; TestPodsOnContainerd runs them on its node.
var containerdNodeStatusTests = []podTest{
	{name: "kubectl describe node reads like a kubelet's", run: testDescribeNode},
	{name: "an imported image appears in the node status", run: testImportedImage},
}

// kubeletConditions are the node conditions the kubelet owns and the
// reason and message each has on a healthy node.
var kubeletConditions = []struct {
	typ             v1.NodeConditionType
	status          v1.ConditionStatus
	reason, message string
}{
	{v1.NodeMemoryPressure, v1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
	{v1.NodeDiskPressure, v1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
	{v1.NodePIDPressure, v1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
	{v1.NodeReady, v1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"},
}

// registrationEvents are the events a kubelet records when it first
// reports its node's conditions.
var registrationEvents = []string{"NodeHasSufficientMemory", "NodeHasNoDiskPressure", "NodeHasSufficientPID"}

// testDescribeNode: `kubectl describe node` on the containerd node shows
// the machine's capacity and the kubelet's allocatable (cpu, memory, pods,
// ephemeral-storage), the system info (machine and boot IDs, kernel, OS
// image, containerd://<version>, the kubelet version), the addresses, all
// four kubelet conditions with the kubelet's reasons and messages; the
// status lists the node's images, and the node events recorded at
// registration are there. (kubectl describe node does not list those: as
// the kubelet's, they are recorded before the Node has a UID, and kubectl
// looks the events up by UID.)
func testDescribeNode(t *testing.T, n *podNode) {
	ctx := t.Context()
	node := waitForNode(t, n.name, "images reported", readyTimeout, func(node *v1.Node) bool { return len(node.Status.Images) > 0 })
	checkRegistrationEvents(t, node)
	out, err := env.cp.Kubectl(ctx, env.cp.AdminKubeconfig, "describe", "node", n.name)
	if err != nil {
		t.Fatal(err)
	}
	d := parseDescribe(out)
	show := func() string { return "\n--- kubectl describe node:\n" + out }

	// Capacity and allocatable.
	memTotal := meminfoKi(t, "MemTotal")
	var root syscall.Statfs_t
	if err := syscall.Statfs(filepath.Join(n.agent.Dir, "root"), &root); err != nil {
		t.Fatal(err)
	}
	diskBytes := int64(root.Blocks) * root.Bsize
	capacity, allocatable := d.fields["Capacity"], d.fields["Allocatable"]
	for _, check := range []struct {
		section, name, want string
	}{
		{"Capacity", "cpu", strconv.Itoa(goruntime.NumCPU())},
		{"Capacity", "memory", strconv.FormatInt(memTotal, 10) + "Ki"},
		{"Capacity", "pods", "110"},
		{"Allocatable", "cpu", strconv.Itoa(goruntime.NumCPU())},
		// The default hard eviction threshold memory.available<100Mi.
		{"Allocatable", "memory", strconv.FormatInt(memTotal-100*1024, 10) + "Ki"},
		{"Allocatable", "pods", "110"},
	} {
		if got := d.fields[check.section][check.name]; got != check.want {
			t.Errorf("%s %s = %q, want %q", check.section, check.name, got, check.want)
		}
	}
	diskCap, err := resource.ParseQuantity(capacity["ephemeral-storage"])
	if err != nil || diskCap.Value() != diskBytes {
		t.Errorf("Capacity ephemeral-storage = %q, want the size of the root directory's filesystem, %d bytes", capacity["ephemeral-storage"], diskBytes)
	}
	// The harness's hard eviction threshold nodefs.available<1% (the
	// kubelet's default 10 % would put a shared test disk under pressure).
	diskAlloc, err := resource.ParseQuantity(allocatable["ephemeral-storage"])
	if want := float64(diskBytes) * 0.99; err != nil || float64(diskAlloc.Value()) < want-4096 || float64(diskAlloc.Value()) > want+4096 {
		t.Errorf("Allocatable ephemeral-storage = %q, want 99%% of %d bytes", allocatable["ephemeral-storage"], diskBytes)
	}
	for k := range capacity {
		if strings.HasPrefix(k, "hugepages-") && allocatable[k] == "" {
			t.Errorf("Capacity has %s but Allocatable does not", k)
		}
	}

	// System info.
	_, version, err := n.containerd.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	info := d.fields["System Info"]
	for _, check := range []struct{ name, want string }{
		{"Machine ID", readTrimmed(t, "/etc/machine-id")},
		{"Boot ID", readTrimmed(t, "/proc/sys/kernel/random/boot_id")},
		{"Kernel Version", hostKernel(t)},
		{"OS Image", hostOSImage(t)},
		{"Operating System", "linux"},
		{"Architecture", goruntime.GOARCH},
		{"Container Runtime Version", "containerd://" + version},
		{"Kubelet Version", node.Status.NodeInfo.KubeletVersion},
	} {
		if got := info[check.name]; got != check.want || got == "" {
			t.Errorf("System Info %s = %q, want %q", check.name, got, check.want)
		}
	}
	if want := map[cluster.ContainerdSeries]string{cluster.ContainerdSeries2: "v2.", cluster.ContainerdSeries16: "1.6."}[n.containerd.Series]; !strings.HasPrefix(version, want) {
		t.Errorf("containerd %s reports version %s, want %s*", n.containerd.Series, version, want)
	}
	if got := d.fields["Addresses"]; got["InternalIP"] != n.agent.IP || got["Hostname"] != n.name {
		t.Errorf("Addresses %v, want InternalIP %s and Hostname %s", got, n.agent.IP, n.name)
	}

	// Conditions: the table's rows are type, status, two timestamps,
	// reason, message.
	for _, want := range kubeletConditions {
		row := d.conditionRow(string(want.typ))
		if row == "" {
			t.Errorf("no %s condition%s", want.typ, show())
			continue
		}
		f := strings.Fields(row)
		if len(f) < 2 || f[1] != string(want.status) || !strings.Contains(row, " "+want.reason+" ") || !strings.HasSuffix(row, want.message) {
			t.Errorf("condition row %q, want status %s, reason %s, message %q", row, want.status, want.reason, want.message)
		}
	}
	if t.Failed() {
		t.Log(show())
	}

	// Images: the status lists the images containerd holds, largest first.
	images := node.Status.Images
	for _, ref := range []string{cluster.BusyboxImage, cluster.PauseImage} {
		if !slices.ContainsFunc(images, func(img v1.ContainerImage) bool { return slices.Contains(img.Names, ref) }) {
			t.Errorf("status.images %v lacks %s", images, ref)
		}
	}
	for i, img := range images {
		if img.SizeBytes <= 0 || len(img.Names) == 0 || len(img.Names) > 5 {
			t.Errorf("image %d: %d names, %d bytes; want 1..5 names and a size", i, len(img.Names), img.SizeBytes)
		}
		if i > 0 && img.SizeBytes > images[i-1].SizeBytes {
			t.Errorf("status.images not sorted by size: %d bytes after %d", img.SizeBytes, images[i-1].SizeBytes)
		}
	}
}

// testImportedImage: an image imported into containerd (as an operator
// would with ctr) shows up in the node's status.images.
func testImportedImage(t *testing.T, n *podNode) {
	ref := "nodekit.local/e2e/imported:" + n.name
	tarball := filepath.Join(n.containerd.Dir, "imported.tar")
	if err := cluster.WriteImage(tarball, ref, map[string]string{"imported.txt": "imported into " + n.name + "\n"}); err != nil {
		t.Fatal(err)
	}
	if err := n.containerd.ImportImage(t.Context(), tarball); err != nil {
		t.Fatal(err)
	}
	node := waitForNode(t, n.name, "imported image "+ref+" in status.images", readyTimeout, func(node *v1.Node) bool {
		return slices.ContainsFunc(node.Status.Images, func(img v1.ContainerImage) bool { return slices.Contains(img.Names, ref) })
	})
	for _, img := range node.Status.Images {
		if slices.Contains(img.Names, ref) && img.SizeBytes <= 0 {
			t.Errorf("imported image %v has size %d", img.Names, img.SizeBytes)
		}
	}
}

// TestForeignConditionSurvivesStatusPatches adds a condition to the node
// the way node-problem-detector or an operator does (kubectl patch of the
// status subresource) and watches ten status patches of the agent, sent
// every second (nodeStatusUpdateFrequency = nodeStatusReportFrequency = 1s):
// every version of the Node keeps the condition as it was written, while
// the kubelet conditions' heartbeats move.
func TestForeignConditionSurvivesStatusPatches(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	ctx := t.Context()
	const name = "foreign-cond-node"
	const patches = 10
	n := newNode(t, name, nodeOptions{updateFrequency: time.Second, reportFrequency: time.Second})
	waitForNode(t, name, "Ready", readyTimeout, isReady)

	now := time.Now().UTC().Format(time.RFC3339)
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"ExampleCondition","status":"True","reason":"ExampleReason","message":"set by kubectl","lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`, now, now)
	if out, err := env.cp.Kubectl(ctx, env.cp.AdminKubeconfig, "patch", "node", name, "--subresource=status", "--type=strategic", "-p", patch); err != nil {
		t.Fatalf("kubectl patch: %v: %s", err, out)
	}
	node, err := env.cp.Client().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	added, ok := nodeCondition(node, "ExampleCondition")
	if !ok {
		t.Fatalf("the kubectl patch did not add ExampleCondition:%s", describeNode(node))
	}

	w, err := env.cp.Client().CoreV1().Nodes().Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
		ResourceVersion: node.ResourceVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	metric := func() float64 {
		m, err := n.agent.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return m.Sum("nodekit_node_status_patches_total", nil)
	}
	before := metric()
	// The agent's reports move the Ready heartbeat; other writers (the
	// node lifecycle controller) may modify the Node too, and every version
	// must keep the condition.
	heartbeat := readyCondition(node).LastHeartbeatTime
	reports := 0
	timeout := time.After(2 * time.Minute)
	for reports < patches {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the node watch closed early")
			}
			updated, isNode := ev.Object.(*v1.Node)
			if !isNode || ev.Type != watch.Modified {
				continue
			}
			got, ok := nodeCondition(updated, "ExampleCondition")
			if !ok {
				t.Fatalf("after %d status reports, a modification removed ExampleCondition:%s", reports, describeNode(updated))
			}
			if !got.LastHeartbeatTime.Equal(&added.LastHeartbeatTime) || !got.LastTransitionTime.Equal(&added.LastTransitionTime) ||
				got.Status != added.Status || got.Reason != added.Reason || got.Message != added.Message {
				t.Fatalf("after %d status reports, a modification changed ExampleCondition from %+v to %+v", reports, added, got)
			}
			if hb := readyCondition(updated).LastHeartbeatTime; !hb.Equal(&heartbeat) {
				reports++
				heartbeat = hb
			}
		case <-timeout:
			t.Fatalf("saw %d of %d node status reports in 2m", reports, patches)
		}
	}
	// The agent counts each PATCH once its answer is in, which may come
	// after the watch event.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return metric()-before >= patches, nil
	})
	if err != nil {
		t.Errorf("the agent counted %v status PATCHes while a watch saw %d reports", metric()-before, reports)
	}
	out, err := env.cp.Kubectl(ctx, env.cp.AdminKubeconfig, "describe", "node", name)
	if err != nil {
		t.Fatal(err)
	}
	if row := parseDescribe(out).conditionRow("ExampleCondition"); !strings.Contains(row, " ExampleReason ") || !strings.HasSuffix(row, "set by kubectl") {
		t.Errorf("kubectl describe node shows ExampleCondition as %q", row)
	}
}

func nodeCondition(n *v1.Node, typ v1.NodeConditionType) (v1.NodeCondition, bool) {
	for _, c := range n.Status.Conditions {
		if c.Type == typ {
			return c, true
		}
	}
	return v1.NodeCondition{}, false
}

// checkRegistrationEvents checks the events recorded about node when it
// registered: NodeHasSufficientMemory, NodeHasNoDiskPressure and
// NodeHasSufficientPID, from the kubelet on the node.
func checkRegistrationEvents(t *testing.T, node *v1.Node) {
	t.Helper()
	sel := fields.Set{"involvedObject.kind": "Node", "involvedObject.name": node.Name}.AsSelector().String()
	var events []v1.Event
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := env.cp.Client().CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return false, nil
		}
		events = list.Items
		for _, reason := range registrationEvents {
			if !slices.ContainsFunc(events, func(ev v1.Event) bool { return ev.Reason == reason }) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		var got []string
		for _, ev := range events {
			got = append(got, ev.Reason)
		}
		t.Fatalf("node %s events %v, want %v", node.Name, got, registrationEvents)
	}
	for _, ev := range events {
		if !slices.Contains(registrationEvents, ev.Reason) {
			continue
		}
		if want := fmt.Sprintf("Node %s status is now: %s", node.Name, ev.Reason); ev.Type != v1.EventTypeNormal || ev.Message != want ||
			ev.Source.Component != "kubelet" || ev.Source.Host != node.Name {
			t.Errorf("event %s: type %s message %q source %+v, want Normal %q from kubelet on %s", ev.Reason, ev.Type, ev.Message, ev.Source, want, node.Name)
		}
	}
}

// describeOutput is `kubectl describe` output split into its top-level
// sections (text by header) and, for sections of "key: value" lines, their
// fields.
type describeOutput struct {
	sections map[string]string
	fields   map[string]map[string]string
}

func parseDescribe(out string) describeOutput {
	d := describeOutput{sections: map[string]string{}, fields: map[string]map[string]string{}}
	var current string
	s := bufio.NewScanner(strings.NewReader(out))
	for s.Scan() {
		line := s.Text()
		if line != "" && line[0] != ' ' {
			header, _, _ := strings.Cut(line, ":")
			current = header
			d.fields[current] = map[string]string{}
			continue
		}
		d.sections[current] += line + "\n"
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			d.fields[current][k] = strings.TrimSpace(v)
		}
	}
	return d
}

// conditionRow returns the row of the Conditions table for typ, trimmed.
func (d describeOutput) conditionRow(typ string) string {
	for _, line := range strings.Split(d.sections["Conditions"], "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == typ {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// meminfoKi returns a /proc/meminfo field in KiB.
func meminfoKi(t *testing.T, field string) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("/proc/meminfo %s: %v", field, err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/meminfo", field)
	return 0
}

func readTrimmed(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}
