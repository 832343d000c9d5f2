package dra

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
)

// testdata/kubelet_dra_manager_state.json was written by the kubelet
// v1.37.2's own checkpoint code (pkg/kubelet/cm/dra/state) for the claim
// below: nodekit must read it and write the same bytes.
func TestCheckpointKubeletFormat(t *testing.T) {
	golden, err := os.ReadFile("testdata/kubelet_dra_manager_state.json")
	if err != nil {
		t.Fatal(err)
	}
	share := types.UID("share-1")
	want := []claimState{{
		ClaimUID: "claim-uid-1", ClaimName: "gpu-claim", Namespace: "default",
		PodUIDs: map[string]struct{}{"pod-uid-1": {}, "pod-uid-2": {}},
		DriverState: map[string]driverState{
			"gpu.example.com": {Devices: []device{{PoolName: "node-1", DeviceName: "gpu-0", ShareID: &share, RequestNames: []string{"gpu"}, CDIDeviceIDs: []string{"example.com/gpu=gpu-0"}}}},
			"nic.example.com": {SkipNodeOperations: []resourceapi.SkipNodeOperation{resourceapi.SkipNodeOperationAll}},
		},
	}}
	got, err := marshalCheckpoint(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, golden) {
		t.Errorf("checkpoint differs from the kubelet's:\n got %s\nwant %s", got, golden)
	}
	read, err := unmarshalCheckpoint(golden)
	if err != nil {
		t.Fatal(err)
	}
	if len(read) != 1 || read[0].ClaimName != "gpu-claim" || len(read[0].PodUIDs) != 2 ||
		read[0].DriverState["gpu.example.com"].Devices[0].CDIDeviceIDs[0] != "example.com/gpu=gpu-0" ||
		!read[0].DriverState["nic.example.com"].skips(resourceapi.SkipNodeOperationNodeUnprepareResources) {
		t.Errorf("read %+v", read)
	}
	// The kubelet's empty checkpoint.
	empty, _ := marshalCheckpoint(nil)
	if want := `{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"ClaimInfoStateList\":[]}","Checksum":2361995144}`; string(empty) != want {
		t.Errorf("empty checkpoint %s, want %s", empty, want)
	}
}

func TestCheckpointCorruptAndMissing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, CheckpointFile)
	if got, err := readCheckpoint(path); err != nil || got != nil {
		t.Fatalf("missing checkpoint: %v, %v", got, err)
	}
	golden, _ := os.ReadFile("testdata/kubelet_dra_manager_state.json")
	if err := os.WriteFile(path, bytes.Replace(golden, []byte("gpu-0"), []byte("gpu-1"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readCheckpoint(path); !errors.Is(err, errCorruptCheckpoint) {
		t.Fatalf("corrupt checkpoint read with %v", err)
	}
	m, err := New(Options{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Run(t.Context()); err == nil {
		t.Fatal("Run accepted a corrupt checkpoint")
	}
}
