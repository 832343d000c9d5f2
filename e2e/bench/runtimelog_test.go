package bench

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestSandboxRequestsReadsBothContainerdForms(t *testing.T) {
	const (
		uid2  = "584e2044-9882-4a1d-8ec6-3db39b4bd2fd"
		uid16 = "16e19973-57c1-4ce5-a59e-babd0977d46a"
	)
	log := `time="2026-12-07T14:08:57.100000000Z" level=info msg="starting cri plugin"
time="2026-12-07T14:08:57.539985817Z" level=info msg="RunPodSandbox for name:\"burst-004\" uid:\"` + uid2 + `\" namespace:\"nodebench-nodekit\""
time="2026-12-07T14:08:58.000000000Z" level=info msg="RunPodSandbox for name:\"burst-004\" uid:\"` + uid2 + `\" namespace:\"nodebench-nodekit\" returns sandbox id \"abc\""
time="2026-12-07T14:08:56.250000000Z" level=info msg="RunPodSandbox for &PodSandboxMetadata{Name:burst-001,Uid:` + uid16 + `,Namespace:nodebench-kubelet,Attempt:0,}"
time="2026-12-07T14:08:59.000000000Z" level=info msg="CreateContainer within sandbox \"abc\" for container &ContainerMetadata{Name:app,Attempt:0,}"
`
	path := filepath.Join(t.TempDir(), "containerd.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := SandboxRequests(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[types.UID]time.Time{
		uid2:  time.Date(2026, 12, 7, 14, 8, 57, 539985817, time.UTC),
		uid16: time.Date(2026, 12, 7, 14, 8, 56, 250000000, time.UTC),
	}
	if len(got) != len(want) {
		t.Fatalf("got %d pods %v, want %d", len(got), got, len(want))
	}
	for uid, at := range want {
		if !got[uid].Equal(at) {
			t.Errorf("pod %s: first request at %v, want %v (the earliest line of the pod)", uid, got[uid], at)
		}
	}
	if _, err := SandboxRequests(filepath.Join(t.TempDir(), "missing.log")); err == nil {
		t.Error("a missing log gave no error")
	}
}
