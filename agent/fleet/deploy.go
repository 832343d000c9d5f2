package fleet

import (
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

// Label is the node label whose value is the fleet's name (every shard's
// nodes carry it); ShardLabel's value is the shard's name.
const (
	Label      = "fleet.nodekit.io/name"
	ShardLabel = "fleet.nodekit.io/shard"
)

// Taint is the taint key a shard registers its nodes with by default
// (NoSchedule, the fleet's name as value): only pods that tolerate it land
// on simulated nodes.
const Taint = "fleet.nodekit.io/simulated"

// NodeNames returns the names of a shard's nodes: <shard>-0001 …
// <shard>-<n>. Shards of a StatefulSet are named <set>-<ordinal>, so the
// names are unique across its shards.
func NodeNames(shard string, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%04d", shard, i+1)
	}
	return names
}

// DeployOptions describe a fleet deployed as a StatefulSet of shards.
type DeployOptions struct {
	// Name names the StatefulSet, its ServiceAccount and RBAC objects, and
	// is the fleet's Label value. Required.
	Name string
	// Namespace is where the StatefulSet and ServiceAccount live.
	// Required.
	Namespace string
	// Image holds the fleet command (examples/fleet) as its entrypoint.
	// Required.
	Image string
	// Shards is the StatefulSet's replicas; NodesPerShard the nodes each
	// runs. Both at least 1.
	Shards, NodesPerShard int
	// Args are more flags for the command (such as --server when the
	// in-cluster address is not reachable from the shards).
	Args []string
	// HostNetwork runs the shards in the host's network namespace.
	HostNetwork bool
	// NodeSelector and Tolerations place the shards.
	NodeSelector map[string]string
	Tolerations  []v1.Toleration
	// MemoryPerNode is the shard's memory request per node (default
	// 4Mi: ~2 MiB measured per node, doubled for bursts of pods); the
	// request adds 64Mi for the process itself.
	MemoryPerNode resource.Quantity
}

// Deployment returns the objects that run the fleet on Kubernetes, to be
// created in order: a ServiceAccount for the shards; its bindings to the
// cluster roles system:node-bootstrapper (create and read
// CertificateSigningRequests) and
// system:certificates.k8s.io:certificatesigningrequests:nodeclient (so
// kube-controller-manager approves its requests for node client
// certificates); a ClusterRole and binding that allow deleting exactly the
// fleet's Node objects (by name, as listed for Shards × NodesPerShard,
// since a node may not delete itself); one that allows reading Services
// (what every node may read too), so that a shard runs one informer on
// them for all its nodes instead of one watch per node; and the
// StatefulSet. Each node
// then acts as system:node:<name> with its own certificate, limited by the
// Node authorizer and NodeRestriction like a kubelet.
//
// The bootstrap rights are those of a kubelet's bootstrap token: the
// service account may obtain a client certificate for any node name.
// Scaling the StatefulSet beyond Shards needs the node-deleting role
// regenerated.
func Deployment(o DeployOptions) ([]runtime.Object, error) {
	if o.Name == "" || o.Namespace == "" || o.Image == "" || o.Shards < 1 || o.NodesPerShard < 1 {
		return nil, fmt.Errorf("fleet deployment %q: Name, Namespace, Image and at least one shard and node per shard are required", o.Name)
	}
	if o.MemoryPerNode.IsZero() {
		o.MemoryPerNode = resource.MustParse("4Mi")
	}
	labels := map[string]string{"app.kubernetes.io/name": "nodekit-fleet", "app.kubernetes.io/instance": o.Name}
	meta := func(name, ns string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels}
	}
	sa := &v1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: meta(o.Name, o.Namespace)}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: o.Name, Namespace: o.Namespace}}
	binding := func(name, role string) *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: meta(name, ""),
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   subject,
		}
	}
	var names []string
	for s := range o.Shards {
		names = append(names, NodeNames(o.Name+"-"+strconv.Itoa(s), o.NodesPerShard)...)
	}
	deleter := &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: meta(o.Name+":delete-nodes", ""),
		Rules:      []rbacv1.PolicyRule{{Verbs: []string{"delete"}, APIGroups: []string{""}, Resources: []string{"nodes"}, ResourceNames: names}},
	}
	reader := &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: meta(o.Name+":read-services", ""),
		Rules:      []rbacv1.PolicyRule{{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{""}, Resources: []string{"services"}}},
	}
	memory := o.MemoryPerNode.DeepCopy()
	memory.Mul(int64(o.NodesPerShard))
	memory.Add(resource.MustParse("64Mi")) // the process before its nodes: ~60 MiB measured
	args := append([]string{"--nodes=" + strconv.Itoa(o.NodesPerShard), "--fleet=" + o.Name}, o.Args...)
	set := &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: meta(o.Name, o.Namespace),
		Spec: appsv1.StatefulSetSpec{
			Replicas:            ptr.To(int32(o.Shards)),
			ServiceName:         o.Name,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: v1.PodSpec{
					ServiceAccountName: o.Name,
					HostNetwork:        o.HostNetwork,
					NodeSelector:       o.NodeSelector,
					Tolerations:        o.Tolerations,
					// Stopping the agents and deleting the Nodes.
					TerminationGracePeriodSeconds: ptr.To[int64](60),
					Containers: []v1.Container{{
						Name:            "fleet",
						Image:           o.Image,
						ImagePullPolicy: v1.PullIfNotPresent,
						Args:            append(args, "--dir=/var/lib/nodekit-fleet"),
						Env: []v1.EnvVar{
							{Name: "POD_NAME", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
							{Name: "POD_IP", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
						},
						Resources: v1.ResourceRequirements{
							Requests: v1.ResourceList{v1.ResourceMemory: memory, v1.ResourceCPU: resource.MustParse("100m")},
						},
						VolumeMounts: []v1.VolumeMount{{Name: "state", MountPath: "/var/lib/nodekit-fleet"}},
					}},
					Volumes: []v1.Volume{{Name: "state", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}},
				},
			},
		},
	}
	return []runtime.Object{
		sa,
		binding(o.Name+":bootstrap", "system:node-bootstrapper"),
		binding(o.Name+":nodeclient", "system:certificates.k8s.io:certificatesigningrequests:nodeclient"),
		deleter,
		binding(o.Name+":delete-nodes", deleter.Name),
		reader,
		binding(o.Name+":read-services", reader.Name),
		set,
	}, nil
}
