package pods

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/podsource"
)

func staticPod(uid string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{
		Namespace: "kube-system", Name: "etcd-node-a", UID: types.UID(uid),
		Annotations: map[string]string{podsource.ConfigSourceAnnotationKey: podsource.FileSource},
	}}
}

// One static pod per name runs at a time, in the order they were admitted;
// a stopped one hands its name to the next in line.
func TestStaticStartsOnePerName(t *testing.T) {
	s := newStaticStarts()
	known := map[types.UID]bool{"v1": true, "v2": true, "v3": true}
	isKnown := func(uid types.UID) bool { return known[uid] }
	p1, p2, p3 := staticPod("v1"), staticPod("v2"), staticPod("v3")
	s.enqueue(p1)
	s.enqueue(p2)
	s.enqueue(p3)
	if s.allow(p2, isKnown) {
		t.Fatal("v2 started before v1, which is first in line")
	}
	if !s.allow(p1, isKnown) || !s.allow(p1, isKnown) {
		t.Fatal("v1, first in line, may not start (or not again)")
	}
	if s.allow(p2, isKnown) {
		t.Fatal("v2 started while v1 runs")
	}
	next, ok := s.stopped(p1)
	if !ok || next != "v2" {
		t.Fatalf("after v1 stopped, next = %q, %v; want v2", next, ok)
	}
	// v2 went away without stopping (which the Controller never lets
	// happen): v3 is not blocked by it.
	delete(known, "v2")
	if !s.allow(p3, isKnown) {
		t.Fatal("v3 may not start although v2 is gone")
	}
	if next, ok := s.stopped(p2); ok {
		t.Errorf("stopping v2, which never ran, hands the name to %q while v3 runs", next)
	}

	// Pods that are not static are never held.
	other := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "etcd-node-a", UID: "api"}}
	s.enqueue(other)
	if !s.allow(other, isKnown) {
		t.Error("a pod from the API server was held back")
	}
	if _, ok := s.stopped(p3); ok {
		t.Error("a pod waits after the last one stopped")
	}
	if len(s.started) != 0 || len(s.waiting) != 0 {
		t.Errorf("state left: started %v, waiting %v", s.started, s.waiting)
	}
}
