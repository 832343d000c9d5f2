package manifest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/dump"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/podsource"
)

// TestDumpForHashIsSpews checks dumpForHash against k8s.io/utils/dump.ForHash
// (go-spew), which the kubelet hashes: the same text for values outside the
// core API package, and for core API values the same text once core.<Type>
// reads v1.<Type> again.
func TestDumpForHashIsSpews(t *testing.T) {
	big := resource.MustParse("123456789012345678901234567890")
	values := map[string]any{
		"object meta": &metav1.ObjectMeta{Name: "n", Labels: map[string]string{"b": "2", "a": "1", "": "0"}, Finalizers: []string{"x", "y"}},
		"time":        metav1.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		"quantities":  map[string]resource.Quantity{"cpu": resource.MustParse("100m"), "mem": resource.MustParse("1Gi"), "big": big},
		"nil things": struct {
			P *int
			S []string
			M map[string]int
		}{},
		"pointers": struct {
			P **int64
			B *bool
		}{P: ptr.To(ptr.To[int64](-3)), B: ptr.To(true)},
		"ints": []any{int8(-1), uint16(7), 3, "s", nil, intstr.FromString("http")},
	}
	for name, v := range values {
		t.Run(name, func(t *testing.T) {
			if got, want := string(dumpForHash(v)), dump.ForHash(v); got != want {
				t.Errorf("dumpForHash:\n%s\ndump.ForHash:\n%s", got, want)
			}
		})
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{"k": "v"}},
		Spec: v1.PodSpec{
			Containers: []v1.Container{{Name: "c", Image: "i", Ports: []v1.ContainerPort{{ContainerPort: 80}},
				Resources: v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}}}},
			SecurityContext:               &v1.PodSecurityContext{RunAsUser: ptr.To[int64](0)},
			TerminationGracePeriodSeconds: ptr.To[int64](30),
		},
	}
	got := string(dumpForHash(pod))
	if !strings.HasPrefix(got, "(*core.Pod){") || !strings.Contains(got, "Containers:([]core.Container)[") {
		t.Errorf("core API types are not printed as the kubelet's internal ones: %s", got)
	}
	if got, want := strings.ReplaceAll(got, "core.", "v1."), dump.ForHash(pod); got != want {
		t.Errorf("dumpForHash of a pod, core. read as v1.:\n%s\ndump.ForHash:\n%s", got, want)
	}
}

// TestStaticPodUIDIsTheKubelets pins the UID of kubeadm's etcd manifest at
// /etc/kubernetes/manifests/etcd.yaml on node-a, so a change of the hashed
// text shows here without the e2e module: e2e/kubeletparity compares the
// UIDs with the kubelet v1.37's own file source on every manifest of its
// testdata, and this value passed it.
func TestStaticPodUIDIsTheKubelets(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "e2e", "kubeletparity", "testdata", "static", "etcd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec, err := NewDecoder(Options{NodeName: "node-a", Source: podsource.FileSource})
	if err != nil {
		t.Fatal(err)
	}
	pod, _, err := dec.Pod(data, "/etc/kubernetes/manifests/etcd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const want = "d4b5f954e8f5f20a673a5b55099924b4"
	if pod.UID != want {
		t.Errorf("UID %s, the kubelet's %s", pod.UID, want)
	}
}
