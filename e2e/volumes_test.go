package e2e

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/e2e/cluster"
)

// Container log rotation on the volumes node: small, so a chatty container
// rotates within seconds (the kubelet checks every 10s).
const (
	volumesNodeLogMaxSize  = 64 << 10
	volumesNodeLogMaxFiles = 3
)

// volumeTests are the tests of issue 10 on a containerd node: volumes, the
// rest of the pod spec, log rotation.
var volumeTests = []podTest{
	{name: "configMap and secret files and env, an edited configMap follows", run: testConfigMapSecret},
	{name: "projected service account token passes TokenReview", run: testProjectedToken},
	{name: "downward API labels, annotations and resources", run: testDownwardAPI},
	{name: "memory emptyDir is tmpfs", run: testMemoryEmptyDir},
	{name: "nfs pod stays ContainerCreating with FailedMount", run: testUnsupportedVolume},
	{name: "PVC bound to a hostPath PV", run: testClaimHostPathPV},
	{name: "PVC bound to a local PV", run: testClaimLocalPV},
	{name: "PVC generic ephemeral volume", run: testGenericEphemeralPV},
	{name: "missing configMap and secret hold the pod until they appear", run: testMissingObjects},
	{name: "kubectl debug adds an ephemeral container", run: testEphemeralContainer},
	{name: "termination messages from file and logs", run: testTerminationMessages},
	{name: "container log is rotated and still reads", run: testLogRotation},
}

// TestVolumesOnContainerd runs the volume and pod spec tests of issue 10 on
// a node agent of its own on a containerd of its own, with small container
// logs.
func TestVolumesOnContainerd(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	n := newContainerdPodNode(t, "ctr-vols",
		"--container-log-max-size="+strconv.Itoa(volumesNodeLogMaxSize), "--container-log-max-files="+strconv.Itoa(volumesNodeLogMaxFiles))
	for _, tc := range volumeTests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, n)
		})
	}
}

// logPath is where the runtime writes a container's log.
func (n *podNode) logPath(pod *v1.Pod, container string) string {
	return filepath.Join(n.agent.Dir, "pod-logs", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID), container, "0.log")
}

// criLogLines reads a CRI-format log (<time> <stream> <P|F> <message>) and
// returns its lines' messages, partial lines joined.
func criLogLines(r io.Reader) ([]string, error) {
	var out []string
	var partial strings.Builder
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), " ", 4)
		if len(parts) < 3 {
			return nil, fmt.Errorf("not a CRI log line: %q", sc.Text())
		}
		if len(parts) == 4 {
			partial.WriteString(parts[3])
		}
		if parts[2] == "F" {
			out = append(out, partial.String())
			partial.Reset()
		}
	}
	return out, sc.Err()
}

// containerLog returns the messages of a container's current log file
// (what `kubectl logs` reads), nil when it cannot be read yet.
func (n *podNode) containerLog(pod *v1.Pod, container string) []string {
	f, err := os.Open(n.logPath(pod, container))
	if err != nil {
		return nil
	}
	defer f.Close()
	lines, _ := criLogLines(f)
	return lines
}

// waitForLogLine waits until a line of the container's log satisfies match
// and returns it.
func (n *podNode) waitForLogLine(t *testing.T, pod *v1.Pod, container, what string, match func(string) bool) string {
	t.Helper()
	var found string
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, podTimeout, true, func(context.Context) (bool, error) {
		for _, l := range n.containerLog(pod, container) {
			if match(l) {
				found = l
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s container %s: no log line %s: %v; log: %q", pod.Namespace, pod.Name, container, what, err, n.containerLog(pod, container))
	}
	return found
}

// podDir is the agent's directory of a pod.
func (n *podNode) podDir(pod *v1.Pod) string {
	return filepath.Join(n.agent.Dir, "root", "pods", string(pod.UID))
}

// testConfigMapSecret: a pod reads its configMap and secret as files and
// as env, and a configMap key through a subPath mount; an edit of the
// configMap reaches the file in the running container (a watch, well
// within the 1m sync period) but not the subPath mount (as upstream); the
// secret volume is a tmpfs.
func testConfigMapSecret(t *testing.T, n *podNode) {
	ctx := t.Context()
	core := env.cp.Client().CoreV1()
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config", Namespace: n.ns}, Data: map[string]string{"greeting": "hello"}}
	if _, err := core.ConfigMaps(n.ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secret := &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-secret", Namespace: n.ns}, Data: map[string][]byte{"password": []byte("s3cret")}}
	if _, err := core.Secrets(n.ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := n.pod("config-reader", "sh", "-c", `echo "env GREETING=$GREETING PASSWORD=$PASSWORD"; grep " /secret " /proc/mounts;
while true; do echo "file greeting=$(cat /config/greeting) password=$(cat /secret/password) sub=$(cat /sub/greeting)"; sleep 1; done`)
	c := &pod.Spec.Containers[0]
	c.Env = []v1.EnvVar{
		{Name: "GREETING", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "app-config"}, Key: "greeting"}}},
		{Name: "PASSWORD", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "app-secret"}, Key: "password"}}},
	}
	c.VolumeMounts = []v1.VolumeMount{{Name: "config", MountPath: "/config"}, {Name: "secret", MountPath: "/secret"},
		{Name: "config", MountPath: "/sub/greeting", SubPath: "greeting"}}
	pod.Spec.Volumes = []v1.Volume{
		{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "app-config"}}}},
		{Name: "secret", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "app-secret"}}},
	}
	start := time.Now()
	pod = n.createPod(t, pod)
	waitForPod(t, n.ns, pod.Name, "Running and Ready", isPodReady)
	t.Logf("pod with a configMap and a secret volume Running and Ready %v after create", time.Since(start).Round(time.Millisecond))

	n.waitForLogLine(t, pod, "main", "with the env", func(l string) bool { return l == "env GREETING=hello PASSWORD=s3cret" })
	n.waitForLogLine(t, pod, "main", "with the files", func(l string) bool { return l == "file greeting=hello password=s3cret sub=hello" })
	mnt := n.waitForLogLine(t, pod, "main", "with the secret's mount", func(l string) bool { return strings.Contains(l, " /secret ") })
	if !strings.HasPrefix(mnt, "tmpfs /secret tmpfs ") || !strings.Contains(mnt, "ro,") {
		t.Errorf("secret volume mount %q, want a read-only tmpfs", mnt)
	}
	t.Logf("secret volume in the container: %s", mnt)
	metrics, err := n.agent.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, plugin := range []string{"kubernetes.io/configmap", "kubernetes.io/secret"} {
		got := metrics.Sum("volume_manager_total_volumes", map[string]string{"plugin_name": plugin, "state": "actual_state_of_world"})
		if got < 1 {
			t.Errorf("volume_manager_total_volumes{plugin_name=%q,state=actual_state_of_world} = %v, want at least 1", plugin, got)
		}
		t.Logf("volume_manager_total_volumes{plugin_name=%q,state=actual_state_of_world} = %v", plugin, got)
	}
	dir := filepath.Join(n.podDir(pod), "volumes", "kubernetes.io~configmap", "config")
	if target, err := os.Readlink(filepath.Join(dir, "..data")); err != nil || !strings.HasPrefix(target, "..20") {
		t.Errorf("configMap volume %s: ..data -> %q, %v; want the atomic writer's timestamped directory", dir, target, err)
	}

	cm.Data["greeting"] = "bonjour"
	edited := time.Now()
	if _, err := core.ConfigMaps(n.ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A subPath mount pins the file it was made from: it does not follow,
	// as with the kubelet.
	n.waitForLogLine(t, pod, "main", "with the edited file", func(l string) bool { return l == "file greeting=bonjour password=s3cret sub=hello" })
	took := time.Since(edited)
	t.Logf("configMap edit seen in the running container's file after %v (sync period 1m; the container reads it every 1s)", took.Round(time.Millisecond))
	if took > time.Minute {
		t.Errorf("the configMap edit took %v to reach the container, more than the 1m sync period", took)
	}
}

// testProjectedToken: the ServiceAccount admission's kube-api-access
// volume is projected: the container reads the namespace, the CA and a
// token; the token authenticates against the API server as the pod's
// service account, bound to the pod (TokenReview and SelfSubjectReview).
func testProjectedToken(t *testing.T, n *podNode) {
	ctx := t.Context()
	const sa = "/var/run/secrets/kubernetes.io/serviceaccount"
	pod := n.pod("token-reader", "sh", "-c", "echo ns=$(cat "+sa+"/namespace); sha256sum "+sa+"/token; ls "+sa+"; sleep 3600")
	pod.Spec.AutomountServiceAccountToken = ptr.To(true)
	start := time.Now()
	pod = n.createPod(t, pod)
	waitForPod(t, n.ns, pod.Name, "Running and Ready", isPodReady)
	t.Logf("pod with the kube-api-access volume Running and Ready %v after create", time.Since(start).Round(time.Millisecond))
	var volume string
	for _, v := range pod.Spec.Volumes {
		if strings.HasPrefix(v.Name, "kube-api-access-") {
			volume = v.Name
		}
	}
	if volume == "" {
		t.Fatalf("the API server added no kube-api-access volume: %+v", pod.Spec.Volumes)
	}
	n.waitForLogLine(t, pod, "main", "with the namespace", func(l string) bool { return l == "ns="+n.ns })
	n.waitForLogLine(t, pod, "main", "listing ca.crt", func(l string) bool { return l == "ca.crt" })
	sum := n.waitForLogLine(t, pod, "main", "with the token's hash", func(l string) bool { return strings.HasSuffix(l, sa+"/token") })

	token, err := os.ReadFile(filepath.Join(n.podDir(pod), "volumes", "kubernetes.io~projected", volume, "token"))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(token)
	if got, _, _ := strings.Cut(sum, " "); got != hex.EncodeToString(h[:]) {
		t.Errorf("the container's token hashes to %s, the volume's on the node to %x", got, h)
	}

	review, err := env.cp.Client().AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: string(token)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := "system:serviceaccount:" + n.ns + ":default"
	st := review.Status
	if !st.Authenticated || st.User.Username != want {
		t.Fatalf("TokenReview: authenticated %t as %q (%s), want %q", st.Authenticated, st.User.Username, st.Error, want)
	}
	if got := st.User.Extra["authentication.kubernetes.io/pod-name"]; len(got) != 1 || got[0] != pod.Name {
		t.Errorf("TokenReview pod-name %v, want [%s]: the token must be bound to the pod", got, pod.Name)
	}
	if got := st.User.Extra["authentication.kubernetes.io/pod-uid"]; len(got) != 1 || got[0] != string(pod.UID) {
		t.Errorf("TokenReview pod-uid %v, want [%s]", got, pod.UID)
	}
	t.Logf("TokenReview: authenticated as %s, bound to pod %v, node %v", st.User.Username,
		st.User.Extra["authentication.kubernetes.io/pod-name"], st.User.Extra["authentication.kubernetes.io/node-name"])

	// The token itself against the API server.
	cfg := rest.AnonymousClientConfig(env.cp.AdminConfig())
	cfg.BearerToken = string(token)
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	self, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview with the pod's token: %v", err)
	}
	if self.Status.UserInfo.Username != want {
		t.Errorf("SelfSubjectReview with the pod's token: %q, want %q", self.Status.UserInfo.Username, want)
	}
}

// testDownwardAPI: a downwardAPI volume holds the pod's labels,
// annotations and its container's resources, env its resource fields; a
// label change reaches the file in the running container.
func testDownwardAPI(t *testing.T, n *podNode) {
	ctx := t.Context()
	pod := n.pod("downward", "sh", "-c", `echo "env MEM_LIMIT=$MEM_LIMIT CPU_REQUEST=$CPU_REQUEST";
while true; do echo "labels $(cat /etc/podinfo/labels | tr '\n' ' ')"; echo "annotations $(cat /etc/podinfo/annotations | grep note)";
echo "cpu_limit $(cat /etc/podinfo/cpu_limit) mem_request $(cat /etc/podinfo/mem_request)"; sleep 1; done`)
	pod.Labels = map[string]string{"app": "downward", "tier": "one"}
	pod.Annotations = map[string]string{"note": "hello"}
	c := &pod.Spec.Containers[0]
	c.Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("32Mi")},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("64Mi")},
	}
	c.Env = []v1.EnvVar{
		{Name: "MEM_LIMIT", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}}},
		{Name: "CPU_REQUEST", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "requests.cpu", Divisor: resource.MustParse("1m")}}},
	}
	c.VolumeMounts = []v1.VolumeMount{{Name: "podinfo", MountPath: "/etc/podinfo"}}
	pod.Spec.Volumes = []v1.Volume{{Name: "podinfo", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
		{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
		{Path: "annotations", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.annotations"}},
		{Path: "cpu_limit", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "main", Resource: "limits.cpu", Divisor: resource.MustParse("1m")}},
		{Path: "mem_request", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "main", Resource: "requests.memory", Divisor: resource.MustParse("1Mi")}},
	}}}}}
	pod = n.createPod(t, pod)
	waitForPod(t, n.ns, pod.Name, "Running and Ready", isPodReady)
	for what, want := range map[string]string{
		"env":         "env MEM_LIMIT=64 CPU_REQUEST=100",
		"labels":      `labels app="downward" tier="one"`,
		"annotations": `annotations note="hello"`,
		"resources":   "cpu_limit 250 mem_request 32",
	} {
		got := n.waitForLogLine(t, pod, "main", "with the "+what, func(l string) bool { return l == want })
		t.Logf("downward API %s: %s", what, got)
	}
	patch := []byte(`{"metadata":{"labels":{"tier":"two"}}}`)
	changed := time.Now()
	if _, err := env.cp.Client().CoreV1().Pods(n.ns).Patch(ctx, pod.Name, "application/strategic-merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	n.waitForLogLine(t, pod, "main", "with the new label", func(l string) bool { return l == `labels app="downward" tier="two"` })
	t.Logf("label change seen in the running container's downward API file after %v", time.Since(changed).Round(time.Millisecond))
}

// testMemoryEmptyDir: an emptyDir of medium Memory is a tmpfs in the
// container, sized by its sizeLimit.
func testMemoryEmptyDir(t *testing.T, n *podNode) {
	pod := n.pod("memory-scratch", "sh", "-c", "grep ' /scratch ' /proc/mounts; echo data > /scratch/f && echo written; sleep 3600")
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "scratch", MountPath: "/scratch"}}
	pod.Spec.Volumes = []v1.Volume{{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{
		Medium: v1.StorageMediumMemory, SizeLimit: ptr.To(resource.MustParse("16Mi"))}}}}
	pod = n.createPod(t, pod)
	waitForPod(t, n.ns, pod.Name, "Running and Ready", isPodReady)
	mnt := n.waitForLogLine(t, pod, "main", "with the mount", func(l string) bool { return strings.Contains(l, " /scratch ") })
	if !strings.HasPrefix(mnt, "tmpfs /scratch tmpfs rw,") || !strings.Contains(mnt, "size=16384k") {
		t.Errorf("memory emptyDir mount %q, want a writable tmpfs of 16Mi", mnt)
	}
	n.waitForLogLine(t, pod, "main", "after the write", func(l string) bool { return l == "written" })
	t.Logf("memory emptyDir in the container: %s", mnt)

	// Deleted, the pod's tmpfs is unmounted and its directory removed.
	dir := n.podDir(pod)
	if !mountedUnder(t, dir) {
		t.Fatalf("no mount under %s while the pod runs", dir)
	}
	deleted := time.Now()
	if err := env.cp.Client().CoreV1().Pods(n.ns).Delete(t.Context(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, podTimeout, true, func(context.Context) (bool, error) {
		_, statErr := os.Stat(dir)
		return os.IsNotExist(statErr) && !mountedUnder(t, dir), nil
	})
	if err != nil {
		t.Fatalf("pod directory %s still there (or mounted) after the pod was deleted: %v", dir, err)
	}
	t.Logf("deleted pod's tmpfs unmounted and directory removed %v after the delete (grace period 5s)", time.Since(deleted).Round(time.Millisecond))
}

// mountedUnder reports whether anything is mounted at or below dir.
func mountedUnder(t *testing.T, dir string) bool {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			return true
		}
	}
	return false
}

// testUnsupportedVolume: a pod with an nfs volume (no plugin on this
// node) never starts: it stays ContainerCreating with a FailedMount
// warning naming the volume, and the runtime gets no sandbox for it.
func testUnsupportedVolume(t *testing.T, n *podNode) {
	pod := n.pod("nfs", "sleep", "3600")
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
		NFS: &v1.NFSVolumeSource{Server: "nfs.example.com", Path: "/export"}}}}
	start := time.Now()
	pod = n.createPod(t, pod)
	ev := waitForPodEvent(t, n.ns, pod.Name, "FailedMount")
	t.Logf("FailedMount %v after create: %s", time.Since(start).Round(time.Millisecond), ev.Message)
	if ev.Type != v1.EventTypeWarning || !strings.Contains(ev.Message, "unmounted volumes=[data]") ||
		!strings.Contains(ev.Message, "nfs volumes are not supported") {
		t.Errorf("FailedMount event %s %q", ev.Type, ev.Message)
	}
	got := waitForPod(t, n.ns, pod.Name, "ContainerCreating", func(p *v1.Pod) bool {
		cs, ok := mainStatus(p)
		return ok && cs.State.Waiting != nil && cs.State.Waiting.Reason == "ContainerCreating"
	})
	// A while later it still has not started.
	time.Sleep(5 * time.Second)
	got = waitForPod(t, n.ns, pod.Name, "still ContainerCreating", func(p *v1.Pod) bool {
		cs, ok := mainStatus(p)
		return ok && cs.State.Waiting != nil && cs.State.Waiting.Reason == "ContainerCreating"
	})
	if got.Status.Phase != v1.PodPending {
		t.Errorf("pod phase %s, want Pending", got.Status.Phase)
	}
	if sb := n.criSandboxes(t, pod.UID); len(sb) != 0 {
		t.Errorf("%d sandboxes for a pod whose volumes are not mounted, want none", len(sb))
	}
}

// testMissingObjects: a pod whose configMap volume names a configMap that
// does not exist stays ContainerCreating with FailedMount, and one whose
// env names a missing secret waits with CreateContainerConfigError, as
// with the kubelet; both start once their object is created.
func testMissingObjects(t *testing.T, n *podNode) {
	ctx := t.Context()
	core := env.cp.Client().CoreV1()
	vol := n.pod("late-volume", "sh", "-c", `echo "config=$(cat /config/k)"; sleep 3600`)
	vol.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "cfg", MountPath: "/config"}}
	vol.Spec.Volumes = []v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "late-config"}}}}}
	envPod := n.pod("late-env", "sh", "-c", "echo token=$TOKEN; sleep 3600")
	envPod.Spec.Containers[0].Env = []v1.EnvVar{{Name: "TOKEN", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: "late-secret"}, Key: "token"}}}}
	start := time.Now()
	vol = n.createPod(t, vol)
	envPod = n.createPod(t, envPod)

	// Under load the first attempt may time out syncing the configMap's
	// watch ("failed to sync configmap cache", the kubelet's words too):
	// wait for the event naming the missing configMap.
	ev := waitForEventText(t, vol, "FailedMount", `configmap "late-config" not found`)
	t.Logf("missing configMap: FailedMount %v after create: %s", time.Since(start).Round(time.Millisecond), ev.Message)
	if ev.Type != v1.EventTypeWarning || !strings.Contains(ev.Message, `volume "cfg"`) {
		t.Errorf("FailedMount event %s %q, want a warning naming volume cfg and the missing configMap", ev.Type, ev.Message)
	}
	waitForPod(t, n.ns, vol.Name, "ContainerCreating", func(p *v1.Pod) bool {
		cs, ok := mainStatus(p)
		return ok && cs.State.Waiting != nil && cs.State.Waiting.Reason == "ContainerCreating"
	})
	got := waitForPod(t, n.ns, envPod.Name, "CreateContainerConfigError", func(p *v1.Pod) bool {
		cs, ok := mainStatus(p)
		return ok && cs.State.Waiting != nil && cs.State.Waiting.Reason == "CreateContainerConfigError"
	})
	cs, _ := mainStatus(got)
	t.Logf("missing secret in env: %s %q %v after create", cs.State.Waiting.Reason, cs.State.Waiting.Message, time.Since(start).Round(time.Millisecond))
	if !strings.Contains(cs.State.Waiting.Message, `secret "late-secret" not found`) {
		t.Errorf("CreateContainerConfigError message %q, want it to name the missing secret", cs.State.Waiting.Message)
	}

	if _, err := core.ConfigMaps(n.ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late-config", Namespace: n.ns},
		Data: map[string]string{"k": "arrived"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := core.Secrets(n.ns).Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "late-secret", Namespace: n.ns},
		Data: map[string][]byte{"token": []byte("t0k")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	waitForPod(t, n.ns, vol.Name, "Running and Ready", isPodReady)
	t.Logf("configMap created: pod %s Running and Ready %v later", vol.Name, time.Since(created).Round(time.Millisecond))
	waitForPod(t, n.ns, envPod.Name, "Running and Ready", isPodReady)
	t.Logf("secret created: pod %s Running and Ready %v later", envPod.Name, time.Since(created).Round(time.Millisecond))
	n.waitForLogLine(t, vol, "main", "with the configMap's content", func(l string) bool { return l == "config=arrived" })
	n.waitForLogLine(t, envPod, "main", "with the secret's value", func(l string) bool { return l == "token=t0k" })
}

// testEphemeralContainer: `kubectl debug` adds an ephemeral container to a
// running pod; it runs in the pod's sandbox, in the target container's
// process namespace, and shows in ephemeralContainerStatuses.
func testEphemeralContainer(t *testing.T, n *podNode) {
	ctx := t.Context()
	pod := n.createPod(t, n.pod("debugged", "sleep", "3601"))
	pod = waitForPod(t, n.ns, pod.Name, "Running and Ready", isPodReady)
	start := time.Now()
	out, err := env.cp.Kubectl(ctx, env.cp.AdminKubeconfig, "debug", "--namespace", n.ns, "pod/"+pod.Name,
		"--image="+cluster.BusyboxImage, "--image-pull-policy=IfNotPresent", "--target=main", "--container=debugger",
		"--", "sh", "-c", "ps; sleep 3600")
	if err != nil {
		t.Fatalf("kubectl debug: %v: %s", err, out)
	}
	t.Logf("kubectl debug: %s", strings.TrimSpace(out))
	got := waitForPod(t, n.ns, pod.Name, "ephemeral container running", func(p *v1.Pod) bool {
		for _, cs := range p.Status.EphemeralContainerStatuses {
			if cs.Name == "debugger" && cs.State.Running != nil {
				return true
			}
		}
		return false
	})
	t.Logf("ephemeral container running %v after kubectl debug", time.Since(start).Round(time.Millisecond))
	if cs, _ := mainStatus(got); cs.RestartCount != 0 || cs.State.Running == nil || !isPodReady(got) {
		t.Errorf("the pod's own container: %s restarts %d, ready %t", stateString(cs.State), cs.RestartCount, isPodReady(got))
	}
	var debugger *runtimeapi.Container
	for _, c := range n.criContainers(t, pod.UID, true) {
		if c.Labels[labelContainerName] == "debugger" {
			debugger = c
		}
	}
	sandboxes := n.criSandboxes(t, pod.UID)
	if debugger == nil || len(sandboxes) != 1 || debugger.PodSandboxId != sandboxes[0].Id {
		t.Fatalf("ephemeral container %v, sandboxes %d: want it running in the pod's one sandbox", debugger, len(sandboxes))
	}
	ps := n.waitForLogLine(t, pod, "debugger", "with the target's process", func(l string) bool { return strings.Contains(l, "sleep 3601") })
	t.Logf("the ephemeral container sees the target's process: %q", strings.TrimSpace(ps))
}

// testTerminationMessages: a container's termination message comes from
// its termination message file, or with FallbackToLogsOnError from the
// last 80 lines of its log when it failed without writing one.
func testTerminationMessages(t *testing.T, n *podNode) {
	file := n.pod("says-bye", "sh", "-c", "printf 'bye from the file' > /dev/termination-log; exit 3")
	file.Spec.RestartPolicy = v1.RestartPolicyNever
	logs := n.pod("fails-loudly", "sh", "-c", "for i in $(seq 1 100); do echo line $i; done; exit 1")
	logs.Spec.RestartPolicy = v1.RestartPolicyNever
	logs.Spec.Containers[0].TerminationMessagePolicy = v1.TerminationMessageFallbackToLogsOnError
	for _, tc := range []struct {
		pod  *v1.Pod
		exit int32
		want string
	}{
		{file, 3, "bye from the file"},
		{logs, 1, func() string {
			var b strings.Builder
			for i := 21; i <= 100; i++ {
				fmt.Fprintf(&b, "line %d\n", i)
			}
			return b.String()
		}()},
	} {
		n.createPod(t, tc.pod)
		got := waitForPod(t, n.ns, tc.pod.Name, "Failed", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
		cs, _ := mainStatus(got)
		term := cs.State.Terminated
		if term == nil || term.ExitCode != tc.exit || term.Message != tc.want {
			t.Errorf("pod %s: terminated %+v, want exit %d with message %q", tc.pod.Name, term, tc.exit, tc.want)
			continue
		}
		t.Logf("pod %s: exit %d, reason %s, termination message of %d bytes (%d lines)", tc.pod.Name, term.ExitCode, term.Reason,
			len(term.Message), strings.Count(term.Message, "\n"))
	}
}

// testLogRotation: a container writing more than containerLogMaxSize has
// its log rotated (moved aside, the runtime reopening the file), older
// rotations gzipped, at most containerLogMaxFiles files kept; the current
// CRI log file goes on where the rotated one stopped.
func testLogRotation(t *testing.T, n *podNode) {
	pod := n.pod("chatty", "sh", "-c",
		`i=0; while true; do echo "line $i padding-padding-padding-padding-padding-padding-padding-padding"; i=$((i+1)); sleep 0.01; done`)
	pod = n.createPod(t, pod)
	waitForPod(t, n.ns, pod.Name, "Running and Ready", isPodReady)
	log := n.logPath(pod, "main")
	start := time.Now()
	var rotated []string
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, podTimeout, true, func(context.Context) (bool, error) {
		rotated, _ = filepath.Glob(log + ".*")
		return slices.ContainsFunc(rotated, func(f string) bool { return strings.HasSuffix(f, ".gz") }), nil
	})
	if err != nil {
		t.Fatalf("no gzipped rotation of %s within %v: files %v", log, podTimeout, rotated)
	}
	t.Logf("log rotated twice (a gzipped file) %v after the container started: %v", time.Since(start).Round(time.Millisecond), baseNames(rotated))
	if len(rotated)+1 > volumesNodeLogMaxFiles {
		t.Errorf("%d log files, want at most containerLogMaxFiles=%d", len(rotated)+1, volumesNodeLogMaxFiles)
	}

	// The newest rotated file ends where the current one begins (read
	// again if a rotation happened meanwhile).
	lineNo := func(l string) int {
		fields := strings.Fields(l)
		if len(fields) < 2 {
			return -1
		}
		i, _ := strconv.Atoi(fields[1])
		return i
	}
	for attempt := 1; ; attempt++ {
		rotated, _ = filepath.Glob(log + ".*")
		slices.Sort(rotated)
		var newest, gzipped string
		for _, f := range rotated {
			if strings.HasSuffix(f, ".gz") {
				gzipped = f
			} else {
				newest = f
			}
		}
		if newest == "" || gzipped == "" {
			t.Fatalf("want a gzipped and an uncompressed rotated file, have %v", baseNames(rotated))
		}
		old, err := readLogFile(newest, false)
		if err != nil || len(old) == 0 {
			t.Fatalf("rotated file %s: %d lines, %v", newest, len(old), err)
		}
		older, err := readLogFile(gzipped, true)
		if err != nil || len(older) == 0 {
			t.Fatalf("gzipped rotated file %s: %d lines, %v", gzipped, len(older), err)
		}
		current := n.containerLog(pod, "main")
		again, _ := filepath.Glob(log + ".*")
		slices.Sort(again)
		if (!slices.Equal(again, rotated) || len(current) == 0) && attempt < 5 {
			// Rotated while reading, or just rotated and the runtime has
			// not written the reopened file yet (seen under CI load).
			time.Sleep(time.Second)
			continue
		}
		if len(current) == 0 {
			t.Fatalf("the current log %s does not read (5 tries, a second apart)", log)
		}
		last, first := lineNo(old[len(old)-1]), lineNo(current[0])
		if first != last+1 {
			t.Errorf("the current log starts at line %d, the rotated %s ends at %d: lines were lost or repeated", first, filepath.Base(newest), last)
		}
		t.Logf("rotated %s: lines %d…%d; current CRI log from line %d (%d lines); gzipped %s: lines %d…%d",
			filepath.Base(newest), lineNo(old[0]), last, first, len(current), filepath.Base(gzipped), lineNo(older[0]), lineNo(older[len(older)-1]))
		return
	}
}

// readLogFile reads a CRI-format log file, gunzipping it if compressed.
func readLogFile(path string, compressed bool) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = f
	if compressed {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s is not gzip: %w", path, err)
		}
		r = zr
	}
	return criLogLines(r)
}

func baseNames(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.Base(p)
	}
	return out
}

// TestImageGCOnContainerd: with imageGCHighThresholdPercent 1 and
// imageGCLowThresholdPercent 0 the image garbage collector must free
// space at once: it removes an unused image, never the image a running
// container uses nor containerd's sandbox image. The node first runs a pod
// with its agent's default settings; then the agent restarts with the
// thresholds (the collector runs at start).
func TestImageGCOnContainerd(t *testing.T) {
	requireContainerd(t)
	t.Parallel()
	ctx := t.Context()
	n := newContainerdPodNode(t, "ctr-imagegc")
	pod := n.createPod(t, n.pod("keeps-busybox", "sleep", "3600"))
	waitForPod(t, n.ns, pod.Name, "Running and Ready", isPodReady)

	const victim = "nodekit.local/e2e/unused:1.0"
	archive := filepath.Join(t.TempDir(), "unused.tar")
	if err := cluster.WriteImage(archive, victim, map[string]string{"unused.txt": "nobody runs this image\n"}); err != nil {
		t.Fatal(err)
	}
	if err := n.containerd.ImportImage(ctx, archive); err != nil {
		t.Fatal(err)
	}
	cri, err := n.containerd.CRI()
	if err != nil {
		t.Fatal(err)
	}
	defer cri.Close()
	images := func() []string {
		resp, err := cri.Images.ListImages(ctx, &runtimeapi.ListImagesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, img := range resp.Images {
			out = append(out, img.RepoTags...)
		}
		slices.Sort(out)
		return out
	}
	before := images()
	if !slices.Contains(before, victim) {
		t.Fatalf("images %v lack the imported %s", before, victim)
	}

	// Restart the agent with thresholds that force a collection.
	args := []string{"--cgroup-root=" + n.cgroupRoot, "--image-gc-high-threshold=1", "--image-gc-low-threshold=0", "--minimum-image-ttl-duration=0s"}
	if err := n.agent.Stop(); err != nil {
		t.Fatalf("stop the agent: %v", err)
	}
	gcAgent, err := env.cp.NewAgent(cluster.AgentOptions{Binary: env.agent, NodeName: n.name, NodeIP: n.agent.IP,
		RuntimeEndpoint: n.endpoint, CgroupDriver: "cgroupfs", ExtraArgs: args})
	if err != nil {
		t.Fatal(err)
	}
	n.agent = gcAgent // the node's cleanup stops this one
	restarted := time.Now()
	if err := gcAgent.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var after []string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, podTimeout, true, func(context.Context) (bool, error) {
		after = images()
		return !slices.Contains(after, victim), nil
	})
	if err != nil {
		t.Fatalf("%s not removed within %v: images %v", victim, podTimeout, after)
	}
	t.Logf("image GC removed %s %v after the agent restarted with thresholds 1/0; images before %v, after %v",
		victim, time.Since(restarted).Round(time.Millisecond), before, after)
	for _, keep := range []string{cluster.BusyboxImage, cluster.PauseImage} {
		if !slices.Contains(after, keep) {
			t.Errorf("image GC removed %s (in use / the sandbox image)", keep)
		}
	}
	waitForPod(t, n.ns, pod.Name, "still Running and Ready", isPodReady)

	// The counter goes up once RemoveImage has returned to the agent, a
	// moment after the image left the runtime's list: wait for it.
	var collected float64
	waitForCondition(t, "kubelet_image_garbage_collected_total{reason=space} ≥ 1", podTimeout, func() (bool, error) {
		metrics, err := gcAgent.Metrics(ctx)
		if err != nil {
			return false, err
		}
		collected = metrics.Sum("kubelet_image_garbage_collected_total", map[string]string{"reason": "space"})
		return collected >= 1, nil
	})
	t.Logf("kubelet_image_garbage_collected_total{reason=space} = %v", collected)
	// Freeing down to 0 % cannot succeed: the node says so, as the kubelet.
	ev, err := waitForNodeEvent(ctx, n.name, "FreeDiskSpaceFailed")
	if err != nil {
		t.Errorf("no FreeDiskSpaceFailed event on the node: %v", err)
	} else {
		t.Logf("node event %s: %s", ev.Reason, ev.Message)
	}
}

// waitForNodeEvent waits for an event with reason about node name.
func waitForNodeEvent(ctx context.Context, name, reason string) (v1.Event, error) {
	var found v1.Event
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, podTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := env.cp.Client().CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range list.Items {
			if ev.InvolvedObject.Kind == "Node" && ev.InvolvedObject.Name == name && ev.Reason == reason {
				found = ev
				return true, nil
			}
		}
		return false, nil
	})
	return found, err
}
