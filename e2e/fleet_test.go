package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit/agent/fleet"
	"github.com/nodekit/nodekit/e2e/bench"
	"github.com/nodekit/nodekit/e2e/cluster"
)

// fleetImage holds examples/fleet, built by the test.
const fleetImage = "nodekit.local/e2e/fleet:1.0"

// The fleet as a deployable: examples/fleet in an image, deployed with
// agent/fleet.Deployment's objects (service account, RBAC, StatefulSet) as
// two shards of three simulated nodes on a containerd node of the
// harness. Every simulated node requests its client certificate with the
// shard's service account and turns Ready; deleting the StatefulSet stops
// the shards, which delete their Nodes.
func TestFleetShardsOnKubernetes(t *testing.T) {
	requireCluster(t)
	requireContainerd(t)
	ctx := t.Context()
	host := newContainerdPodNode(t, "fleet-host")
	src, err := cluster.LocateSource()
	if err != nil {
		t.Fatal(err)
	}
	tarball, err := cluster.BuildProgramImage(ctx, src, "github.com/nodekit/nodekit/examples/fleet", fleetImage, t.TempDir(), progress)
	if err != nil {
		t.Fatal(err)
	}
	if err := host.containerd.ImportImage(ctx, tarball); err != nil {
		t.Fatal(err)
	}

	const name, shards, perShard = "e2e-fleet", 2, 3
	objs, err := fleet.Deployment(fleet.DeployOptions{
		Name: name, Namespace: host.ns, Image: fleetImage, Shards: shards, NodesPerShard: perShard,
		// No kube-proxy routes the in-cluster address here: the shards
		// reach the API server on the host's loopback.
		Args: []string{"--server=" + env.cp.Server}, HostNetwork: true,
		NodeSelector: map[string]string{v1.LabelHostname: host.name},
	})
	if err != nil {
		t.Fatal(err)
	}
	client := env.cp.Client()
	began := time.Now()
	for _, obj := range objs {
		if err := createObject(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		for _, obj := range objs {
			if err := deleteClusterObject(ctx, obj); err != nil {
				t.Errorf("delete %T: %v", obj, err)
			}
		}
	})

	var names []string
	for s := range shards {
		names = append(names, fleet.NodeNames(fmt.Sprintf("%s-%d", name, s), perShard)...)
	}
	for _, n := range names {
		node := waitForNode(t, n, "Ready", 3*time.Minute, isReady)
		if node.Labels[fleet.Label] != name || !strings.HasPrefix(n, node.Labels[fleet.ShardLabel]+"-") {
			t.Errorf("node %s: labels %v, want %s=%s and its shard", n, node.Labels, fleet.Label, name)
		}
		if len(node.Spec.Taints) == 0 || node.Spec.Taints[0].Key != fleet.Taint {
			t.Errorf("node %s: taints %v, want %s", n, node.Spec.Taints, fleet.Taint)
		}
	}
	t.Logf("%d shards × %d nodes: all Ready %s after the StatefulSet was created", shards, perShard, time.Since(began).Round(time.Millisecond))
	logShardRSS(t, name)

	if err := client.AppsV1().StatefulSets(host.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: fleet.Label + "=" + name})
		if err != nil {
			return false, nil
		}
		return len(list.Items) == 0, nil
	})
	if err != nil {
		t.Fatalf("the fleet's nodes are still there 3m after its StatefulSet was deleted: %v", err)
	}
	t.Logf("all %d nodes gone %s after the StatefulSet was deleted", len(names), time.Since(deleted).Round(time.Millisecond))
}

// logShardRSS logs the RSS of each shard process of fleet name on this
// machine (the test runs beside the node's containerd).
func logShardRSS(t *testing.T, name string) {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmd, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(cmd), "--fleet="+name+"\x00") {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(p, "/proc/%d/cmdline", &pid); err != nil {
			continue
		}
		if st, err := bench.ReadProcStats(pid); err == nil {
			t.Logf("shard process %d: RSS %.1f MiB", pid, float64(st.RSS)/(1<<20))
		}
	}
}

// createObject creates one of fleet.Deployment's objects.
func createObject(ctx context.Context, obj runtime.Object) error {
	c := env.cp.Client()
	var err error
	switch o := obj.(type) {
	case *v1.ServiceAccount:
		_, err = c.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRole:
		_, err = c.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRoleBinding:
		_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
	case *appsv1.StatefulSet:
		_, err = c.AppsV1().StatefulSets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	default:
		err = fmt.Errorf("unexpected object %T", obj)
	}
	return err
}

// deleteClusterObject deletes the cluster-scoped objects among
// fleet.Deployment's (the namespaced ones go with the test's namespace).
func deleteClusterObject(ctx context.Context, obj runtime.Object) error {
	c := env.cp.Client()
	var err error
	switch o := obj.(type) {
	case *rbacv1.ClusterRole:
		err = c.RbacV1().ClusterRoles().Delete(ctx, o.Name, metav1.DeleteOptions{})
	case *rbacv1.ClusterRoleBinding:
		err = c.RbacV1().ClusterRoleBindings().Delete(ctx, o.Name, metav1.DeleteOptions{})
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
