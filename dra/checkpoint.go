package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/internal/atomicfile"
)

// CheckpointFile is the name of the claim checkpoint in the state
// directory (the kubelet's root directory), as the kubelet's DRA manager.
const CheckpointFile = "dra_manager_state"

const (
	checkpointKind       = "DRACheckpoint"
	checkpointAPIVersion = "checkpoint.dra.kubelet.k8s.io/v1"
)

// claimState is what the checkpoint keeps of a claim, field for field the
// kubelet's state.ClaimInfoState: the JSON names are Go's defaults, so they
// must not change.
type claimState struct {
	ClaimUID  types.UID
	ClaimName string
	Namespace string
	// PodUIDs is a set (JSON: {"uid":{}}), as the kubelet's sets.Set.
	PodUIDs     map[string]struct{}
	DriverState map[string]driverState
}

// driverState is the kubelet's state.DriverState: the devices one driver
// prepared for the claim, and the node operations the allocation lets the
// kubelet skip.
type driverState struct {
	Devices            []device
	SkipNodeOperations []resourceapi.SkipNodeOperation `json:"skipNodeOperations,omitempty"`
}

// skips tells whether op (or every operation) is skipped for the driver.
func (s driverState) skips(op resourceapi.SkipNodeOperation) bool {
	return slices.Contains(s.SkipNodeOperations, resourceapi.SkipNodeOperationAll) ||
		slices.Contains(s.SkipNodeOperations, op)
}

// device is the kubelet's state.Device: a device NodePrepareResources
// returned.
type device struct {
	PoolName     string
	DeviceName   string
	ShareID      *types.UID
	RequestNames []string
	CDIDeviceIDs []string
}

type checkpointData struct {
	Kind               string `json:"kind,omitempty"`
	APIVersion         string `json:"apiVersion,omitempty"`
	ClaimInfoStateList []claimState
}

type checkpointFile struct {
	Data     string
	Checksum uint32
}

// errCorruptCheckpoint is returned for a checkpoint whose checksum does
// not match its data.
var errCorruptCheckpoint = errors.New("checkpoint is corrupted")

// marshalCheckpoint returns the checkpoint file's content for the claims,
// as the kubelet writes it: {"Data": "<JSON>", "Checksum": CRC-32 (IEEE) of
// the data}.
func marshalCheckpoint(claims []claimState) ([]byte, error) {
	if claims == nil {
		claims = []claimState{}
	}
	data, err := json.Marshal(checkpointData{Kind: checkpointKind, APIVersion: checkpointAPIVersion, ClaimInfoStateList: claims})
	if err != nil {
		return nil, err
	}
	return json.Marshal(checkpointFile{Data: string(data), Checksum: crc32.ChecksumIEEE(data)})
}

// unmarshalCheckpoint reads a checkpoint file's content and verifies it.
func unmarshalCheckpoint(blob []byte) ([]claimState, error) {
	var f checkpointFile
	if err := json.Unmarshal(blob, &f); err != nil {
		return nil, err
	}
	if sum := crc32.ChecksumIEEE([]byte(f.Data)); sum != f.Checksum {
		return nil, fmt.Errorf("%w: checksum %d, data's %d", errCorruptCheckpoint, f.Checksum, sum)
	}
	var d checkpointData
	if err := json.Unmarshal([]byte(f.Data), &d); err != nil {
		return nil, err
	}
	return d.ClaimInfoStateList, nil
}

// readCheckpoint reads the checkpoint at path; a missing file is an empty
// checkpoint.
func readCheckpoint(path string) ([]claimState, error) {
	blob, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return unmarshalCheckpoint(blob)
}

// writeCheckpoint writes the checkpoint at path atomically (a temporary
// file in the same directory renamed over it, as the kubelet's file store).
func writeCheckpoint(path string, claims []claimState) error {
	blob, err := marshalCheckpoint(claims)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	return atomicfile.Write(path, blob)
}
