package fleet_test

import (
	"fmt"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/nodekit/nodekit/agent/fleet"
)

func TestDeploymentGrantsOnlyWhatShardsNeed(t *testing.T) {
	objs, err := fleet.Deployment(fleet.DeployOptions{Name: "sim", Namespace: "ns", Image: "img", Shards: 3, NodesPerShard: 2, Args: []string{"--server=https://x"}})
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	var set *appsv1.StatefulSet
	var deleter, reader *rbacv1.ClusterRole
	for _, obj := range objs {
		switch o := obj.(type) {
		case *rbacv1.ClusterRoleBinding:
			if len(o.Subjects) != 1 || o.Subjects[0].Kind != rbacv1.ServiceAccountKind || o.Subjects[0].Name != "sim" || o.Subjects[0].Namespace != "ns" {
				t.Errorf("binding %s: subjects %v, want the shards' service account only", o.Name, o.Subjects)
			}
			roles = append(roles, o.RoleRef.Name)
		case *rbacv1.ClusterRole:
			if o.Name == "sim:read-services" {
				reader = o
			} else {
				deleter = o
			}
		case *appsv1.StatefulSet:
			set = o
		case *v1.ServiceAccount:
		default:
			t.Errorf("unexpected object %T", obj)
		}
	}
	slices.Sort(roles)
	want := []string{"sim:delete-nodes", "sim:read-services", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", "system:node-bootstrapper"}
	if !slices.Equal(roles, want) {
		t.Errorf("bound roles %v, want %v", roles, want)
	}
	if deleter == nil || len(deleter.Rules) != 1 {
		t.Fatalf("node-deleting role %+v, want one rule", deleter)
	}
	r := deleter.Rules[0]
	wantNames := []string{"sim-0-0001", "sim-0-0002", "sim-1-0001", "sim-1-0002", "sim-2-0001", "sim-2-0002"}
	if !slices.Equal(r.Verbs, []string{"delete"}) || !slices.Equal(r.Resources, []string{"nodes"}) || !slices.Equal(r.ResourceNames, wantNames) {
		t.Errorf("node-deleting rule %+v, want delete on nodes %v only", r, wantNames)
	}
	if reader == nil || len(reader.Rules) != 1 || !slices.Equal(reader.Rules[0].Resources, []string{"services"}) || slices.Contains(reader.Rules[0].Verbs, "create") {
		t.Errorf("services role %+v, want read on services only", reader)
	}
	if set == nil || *set.Spec.Replicas != 3 || set.Spec.Template.Spec.ServiceAccountName != "sim" {
		t.Fatalf("StatefulSet %+v, want 3 replicas with the service account", set)
	}
	args := set.Spec.Template.Spec.Containers[0].Args
	for _, a := range []string{"--nodes=2", "--fleet=sim", "--server=https://x"} {
		if !slices.Contains(args, a) {
			t.Errorf("shard args %v lack %s", args, a)
		}
	}
	if _, err := fleet.Deployment(fleet.DeployOptions{Name: "sim", Namespace: "ns", Image: "img"}); err == nil {
		t.Error("a deployment of no shards was accepted")
	}
}

func ExampleNodeNames() {
	// The second shard of a StatefulSet named "sim", 3 nodes each.
	fmt.Println(fleet.NodeNames("sim-1", 3))
	// Output: [sim-1-0001 sim-1-0002 sim-1-0003]
}
