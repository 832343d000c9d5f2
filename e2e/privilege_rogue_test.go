package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/e2e/cluster"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// TestWriteToAnotherNodeIsRefused starts a node, then a second agent with
// its own credentials (system:node:priv-rogue) but the first node's name
// (--hostname-override, as a misconfigured machine) and a static pod. Every
// write it attempts on the other node's objects (registering the Node, its
// Lease) and every read of them must be refused by the Node authorizer or NodeRestriction, and the
// agent must log each refusal with the object's name, retry with back-off
// (a bounded number of requests per minute, from the audit log, the
// registration's interval growing to its 7 s cap) and keep serving its
// other work: its healthz and the static pod, which runs on its runtime.
// The other node stays Ready. It prints the requests by kind over the
// window and the registration's retry intervals.
func TestWriteToAnotherNodeIsRefused(t *testing.T) {
	requireCluster(t)
	t.Parallel()
	ctx := t.Context()
	victim := newNode(t, "priv-victim", nodeOptions{})
	waitForNode(t, victim.name, "Ready", readyTimeout, isReady)
	ns := newNamespace(t, "priv-rogue")
	manifests := t.TempDir()
	writeManifest(t, filepath.Join(manifests, "web.yaml"), staticManifest(ns, "rogue-web", "1"))

	const rogueName = "priv-rogue"
	// Registered before the node's cleanup, so the excuse ends after the
	// agent stopped.
	t.Cleanup(excuseDenials(rogueName, "TestWriteToAnotherNodeIsRefused: an agent given another node's name"))
	start := time.Now()
	rogue := newNode(t, rogueName, nodeOptions{extraArgs: []string{
		"--hostname-override=" + victim.name,
		"--pod-manifest-path=" + manifests,
	}})

	img, err := fakecri.NewImage(cluster.BusyboxImage, 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	rogue.fake.AddImage(img)

	// Its other work goes on: the static pod runs on its runtime.
	conn, err := grpc.NewClient(rogue.endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cri := runtimeapi.NewRuntimeServiceClient(conn)
	var staticRunning time.Duration
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, podTimeout, true, func(ctx context.Context) (bool, error) {
		cs, err := cri.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
			State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		}})
		if err != nil {
			return false, nil
		}
		for _, c := range cs.Containers {
			// Static pods are named after their node.
			if strings.HasPrefix(c.Labels["io.kubernetes.pod.name"], "rogue-web") {
				staticRunning = time.Since(start)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("the rogue agent's static pod is not running on its runtime: %v", err)
	}

	// Watch it for a minute from its start.
	const window = time.Minute
	time.Sleep(time.Until(start.Add(window)))
	resp, err := http.Get(rogue.agent.HealthzURL)
	if err != nil {
		t.Errorf("the rogue agent's healthz: %v", err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("the rogue agent's healthz answered %s", resp.Status)
		}
	}
	waitForNode(t, victim.name, "still Ready", readyTimeout, isReady)

	var (
		total    int
		byKind   = map[string]int{}
		refused  = map[string]int{}
		attempts []time.Time // node registrations
		offences []string
	)
	for _, r := range readAuditRecords(t) {
		if nodeOf(r) != rogueName || r.RequestReceived.Before(start) || r.RequestReceived.After(start.Add(window)) {
			continue
		}
		total++
		key := requestKey(r)
		byKind[key]++
		if r.Code == 403 {
			refused[key]++
		}
		if key == "create nodes" {
			attempts = append(attempts, r.RequestReceived)
		}
		// Nothing of the other node's may be touched.
		if o := r.ObjectRef; o != nil && r.Code < 300 {
			switch {
			case o.Resource == "nodes" || o.Resource == "leases":
				offences = append(offences, r.String())
			case o.Resource == "pods" && (o.Name != "" || r.Verb == "create"):
				offences = append(offences, r.String())
			}
		}
	}
	if len(offences) > 0 {
		t.Errorf("the apiserver let the rogue agent touch the other node's objects:\n  %s", strings.Join(offences, "\n  "))
	}
	// (No mirror pod is attempted: the agent creates mirror pods once its
	// node is known, which a node it may not read never is.)
	for _, want := range []string{"create nodes", "get leases.coordination.k8s.io"} {
		if refused[want] == 0 {
			t.Errorf("no refused %q by the rogue agent in the audit log (refused: %v)", want, refused)
		}
	}
	// Back-off, not a hot loop: no kind of request more often than every
	// 2 s on average over the minute, the registration's interval grown to
	// its cap. (Each registration attempt records the node's condition
	// events, as the kubelet's; client-go's spam filter caps them at 25 per
	// object.)
	for key, n := range byKind {
		if n > int(window/(2*time.Second)) {
			t.Errorf("the rogue agent made %d %q requests in %s", n, key, window)
		}
	}
	var intervals []string
	for i := 1; i < len(attempts); i++ {
		intervals = append(intervals, attempts[i].Sub(attempts[i-1]).Round(100*time.Millisecond).String())
	}
	if len(attempts) < 3 || attempts[len(attempts)-1].Sub(attempts[len(attempts)-2]) < 5*time.Second {
		t.Errorf("node registration attempts at intervals %v, want back-off growing past 5 s", intervals)
	}

	// Each refusal is logged with the object's name.
	log, err := os.ReadFile(rogue.agent.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	logged := map[string]int{}
	for _, line := range strings.Split(string(log), "\n") {
		if !strings.Contains(line, "forbidden") {
			continue
		}
		for _, what := range []string{`nodes \"` + victim.name + `\"`, `leases.coordination.k8s.io \"` + victim.name + `\"`, `pods \"rogue-web-` + victim.name + `\"`} {
			if strings.Contains(line, what) {
				logged[strings.ReplaceAll(what, `\"`, `"`)]++
			}
		}
	}
	for _, what := range []string{`nodes "` + victim.name + `"`, `leases.coordination.k8s.io "` + victim.name + `"`} {
		if logged[what] == 0 {
			t.Errorf("the rogue agent's log has no refusal naming %s (log %s)", what, rogue.agent.LogPath)
		}
	}

	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var rows []string
	for _, k := range kinds {
		rows = append(rows, fmt.Sprintf("%s %d (%d refused)", k, byKind[k], refused[k]))
	}
	t.Logf("rogue agent (system:node:%s named %s): %d requests in %s: %s; node registration retried at %v; refusals logged: %v; static pod running on its runtime after %s; healthz 200; %s still Ready",
		rogueName, victim.name, total, window, strings.Join(rows, ", "), intervals, logged, staticRunning.Round(100*time.Millisecond), victim.name)
}
