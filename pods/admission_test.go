package pods

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/podsource"
)

func admitNode() *v1.Node {
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{"zone": "a"}},
		Spec:       v1.NodeSpec{Taints: []v1.Taint{{Key: "gpu", Value: "yes", Effect: v1.TaintEffectNoSchedule}}},
		Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			v1.ResourceCPU:    resource.MustParse("2"),
			v1.ResourceMemory: resource.MustParse("4Gi"),
			v1.ResourcePods:   resource.MustParse("3"),
		}},
	}
}

func podRequesting(name, cpu, mem string) *v1.Pod {
	req := v1.ResourceList{}
	if cpu != "" {
		req[v1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		req[v1.ResourceMemory] = resource.MustParse(mem)
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: "uid-" + "name"},
		Spec: v1.PodSpec{NodeName: "node-a", Containers: []v1.Container{{
			Name: "c", Image: "busybox", Resources: v1.ResourceRequirements{Requests: req},
		}}},
	}
}

func TestGeneralPredicates(t *testing.T) {
	admit := GeneralPredicates(klog.Background())
	withPort := func(p *v1.Pod, ip string, port int32) *v1.Pod {
		p.Spec.Containers[0].Ports = []v1.ContainerPort{{HostIP: ip, HostPort: port, ContainerPort: port}}
		return p
	}
	for _, tc := range []struct {
		name       string
		pod        *v1.Pod
		others     []*v1.Pod
		node       *v1.Node
		wantReason string
		wantMsg    string
	}{
		{name: "fits", pod: podRequesting("a", "1", "1Gi"), others: []*v1.Pod{podRequesting("b", "500m", "1Gi")}},
		{name: "no requests always fit", pod: podRequesting("a", "", ""), others: []*v1.Pod{podRequesting("b", "2", "4Gi")}},
		{name: "out of cpu", pod: podRequesting("a", "1500m", ""), others: []*v1.Pod{podRequesting("b", "1", "")},
			wantReason: "OutOfcpu", wantMsg: "Node didn't have enough resource: cpu, requested: 1500, used: 1000, capacity: 2000"},
		{name: "out of memory", pod: podRequesting("a", "", "3Gi"), others: []*v1.Pod{podRequesting("b", "", "2Gi")},
			wantReason: "OutOfmemory", wantMsg: "resource: memory, requested: 3221225472, used: 2147483648, capacity: 4294967296"},
		{name: "cpu reported before memory", pod: podRequesting("a", "3", "5Gi"), wantReason: "OutOfcpu"},
		{name: "out of pods", pod: podRequesting("a", "", ""), others: []*v1.Pod{podRequesting("b", "", ""), podRequesting("c", "", ""), podRequesting("d", "", "")},
			wantReason: "OutOfpods", wantMsg: "resource: pods, requested: 1, used: 3, capacity: 3"},
		// An extended resource the node does not advertise is dropped
		// before the fit check (the kubelet's removeMissingExtendedResources),
		// in init containers too; one it advertises is checked.
		{name: "extended resource not advertised", pod: func() *v1.Pod {
			p := podRequesting("a", "", "")
			p.Spec.Containers[0].Resources.Requests["example.com/gpu"] = resource.MustParse("1")
			p.Spec.InitContainers = []v1.Container{{Name: "init", Resources: v1.ResourceRequirements{
				Requests: v1.ResourceList{"example.com/fpga": resource.MustParse("2")}}}}
			return p
		}()},
		{name: "extended resource advertised and short", pod: func() *v1.Pod {
			p := podRequesting("a", "", "")
			p.Spec.Containers[0].Resources.Requests["example.com/gpu"] = resource.MustParse("2")
			return p
		}(), node: func() *v1.Node {
			n := admitNode()
			n.Status.Allocatable["example.com/gpu"] = resource.MustParse("1")
			return n
		}(), wantReason: "OutOfexample.com/gpu", wantMsg: "resource: example.com/gpu, requested: 2, used: 0, capacity: 1"},
		{name: "native resource in the kubernetes.io domain not dropped", pod: func() *v1.Pod {
			p := podRequesting("a", "", "")
			p.Spec.Containers[0].Resources.Requests["hugepages-2Mi"] = resource.MustParse("2Mi")
			return p
		}()},
		{name: "node selector", pod: func() *v1.Pod {
			p := podRequesting("a", "", "")
			p.Spec.NodeSelector = map[string]string{"zone": "b"}
			return p
		}(), wantReason: "NodeAffinity", wantMsg: "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"},
		{name: "other node", pod: func() *v1.Pod {
			p := podRequesting("a", "", "")
			p.Spec.NodeName = "node-b"
			return p
		}(), wantReason: "NodeName"},
		{name: "host port taken", pod: withPort(podRequesting("a", "", ""), "", 8080),
			others: []*v1.Pod{withPort(podRequesting("b", "", ""), "127.0.0.1", 8080)}, wantReason: "NodePorts"},
		{name: "host port on other ip", pod: withPort(podRequesting("a", "", ""), "127.0.0.2", 8080),
			others: []*v1.Pod{withPort(podRequesting("b", "", ""), "127.0.0.1", 8080)}},
		{name: "NoExecute taint not tolerated", pod: podRequesting("a", "", ""), node: func() *v1.Node {
			n := admitNode()
			n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: "drain", Effect: v1.TaintEffectNoExecute})
			return n
		}(), wantReason: "TaintToleration"},
		{name: "NoExecute taint tolerated", pod: func() *v1.Pod {
			p := podRequesting("a", "", "")
			p.Spec.Tolerations = []v1.Toleration{{Key: "drain", Operator: v1.TolerationOpExists}}
			return p
		}(), node: func() *v1.Node {
			n := admitNode()
			n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: "drain", Effect: v1.TaintEffectNoExecute})
			return n
		}()},
		{name: "static pod ignores taints", pod: func() *v1.Pod {
			p := podRequesting("a", "", "")
			p.Annotations = map[string]string{podsource.ConfigSourceAnnotationKey: podsource.FileSource}
			return p
		}(), node: func() *v1.Node {
			n := admitNode()
			n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: "drain", Effect: v1.TaintEffectNoExecute})
			return n
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := tc.node
			if node == nil {
				node = admitNode()
			}
			r := admit.Admit(AdmitAttributes{Pod: tc.pod, OtherPods: tc.others, Node: node})
			if tc.wantReason == "" {
				if !r.Admit {
					t.Fatalf("rejected: %s: %s", r.Reason, r.Message)
				}
				return
			}
			if r.Admit || r.Reason != tc.wantReason || !strings.Contains(r.Message, tc.wantMsg) {
				t.Fatalf("got %+v, want rejection %s containing %q", r, tc.wantReason, tc.wantMsg)
			}
		})
	}
	if r := admit.Admit(AdmitAttributes{Pod: podRequesting("a", "", "")}); r.Admit || r.Reason != ReasonInvalidNodeInfo {
		t.Errorf("without a node: %+v, want InvalidNodeInfo", r)
	}
}
