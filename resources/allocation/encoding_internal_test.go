package allocation

import (
	"encoding/json"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestCheckpointDataIsTheEntriesJSON: the checkpoint's data joined from
// the entries' kept encodings is json.Marshal of the entries byte for
// byte, through records, a changed allocation (its encoding made again),
// removals and UIDs that JSON escapes.
func TestCheckpointDataIsTheEntriesJSON(t *testing.T) {
	m := New(Options{})
	pod := func(uid, cpu string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: types.UID(uid)},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{
				Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}}}}}}
	}
	check := func(step string) {
		t.Helper()
		m.mu.Lock()
		defer m.mu.Unlock()
		got, err := m.checkpointDataLocked()
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(checkpointInfo{Entries: m.entries})
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("%s: data\n%s\nwant\n%s", step, got, want)
		}
	}
	check("empty")
	for _, uid := range []string{"b", "a", "c<&>", "é-1", "a-2", `q"uote`} {
		if err := m.Record(pod(uid, "100m")); err != nil {
			t.Fatal(err)
		}
	}
	check("recorded")
	check("again, from the kept encodings")
	if err := m.Record(pod("a", "250m")); err != nil {
		t.Fatal(err)
	}
	check("an allocation changed")
	if err := m.RemovePod("b"); err != nil {
		t.Fatal(err)
	}
	if err := m.RemoveOrphans(func(uid types.UID) bool { return uid != "c<&>" }); err != nil {
		t.Fatal(err)
	}
	check("removed")
	for uid := range m.entries {
		if err := m.RemovePod(uid); err != nil {
			t.Fatal(err)
		}
	}
	check("all removed")
}
