// Package state reads and writes the memory manager's checkpoint,
// <root-dir>/memory_manager_state, in the kubelet's formats. The package
// and type names are part of the legacy checksum (the spew dump of
// "state.MemoryManagerCheckpoint" and its field types), so they must not
// change: they mirror the kubelet's.
//
// The kubelet 1.37 writes the v3 format: the v1 fields (policyName,
// machineState, entries, checksum) for older kubelets, and data (the JSON
// of MemoryManagerCheckpointData) with dataChecksum, which 1.37 verifies. A
// v1 file (kubelets before 1.36) is read as well.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/dump"

	"github.com/nodekit/nodekit/internal/checksum"
)

// MemoryTable is one memory type's sizes on a NUMA node, in bytes.
type MemoryTable struct {
	TotalMemSize   uint64 `json:"total"`
	SystemReserved uint64 `json:"systemReserved"`
	Allocatable    uint64 `json:"allocatable"`
	Reserved       uint64 `json:"reserved"`
	Free           uint64 `json:"free"`
}

// NUMANodeState is a NUMA node's memory and the group of nodes (Cells) its
// assignments span.
type NUMANodeState struct {
	NumberOfAssignments int                              `json:"numberOfAssignments"`
	MemoryMap           map[v1.ResourceName]*MemoryTable `json:"memoryMap"`
	Cells               []int                            `json:"cells"`
}

// NUMANodeMap is the machine's NUMA nodes by ID.
type NUMANodeMap map[int]*NUMANodeState

// Clone returns a deep copy.
func (nm NUMANodeMap) Clone() NUMANodeMap {
	out := NUMANodeMap{}
	for id, s := range nm {
		if s == nil {
			out[id] = nil
			continue
		}
		c := &NUMANodeState{NumberOfAssignments: s.NumberOfAssignments, Cells: append([]int{}, s.Cells...)}
		if s.MemoryMap != nil {
			c.MemoryMap = map[v1.ResourceName]*MemoryTable{}
			for k, t := range s.MemoryMap {
				tc := *t
				c.MemoryMap[k] = &tc
			}
		}
		out[id] = c
	}
	return out
}

// Block is memory of one type given to a container on NUMA nodes.
type Block struct {
	NUMAAffinity []int           `json:"numaAffinity"`
	Type         v1.ResourceName `json:"type"`
	Size         uint64          `json:"size"`
}

// ContainerMemoryAssignments are the containers' blocks by pod UID and
// container name.
type ContainerMemoryAssignments map[string]map[string][]Block

// MemoryManagerCheckpointV1 is the kubelet's v1 checkpoint.
type MemoryManagerCheckpointV1 struct {
	PolicyName   string                     `json:"policyName"`
	MachineState NUMANodeMap                `json:"machineState"`
	Entries      ContainerMemoryAssignments `json:"entries,omitempty"`
	Checksum     checksum.Checksum          `json:"checksum"`
}

// MemoryManagerCheckpointData is the v3 payload.
type MemoryManagerCheckpointData struct {
	PolicyName   string                     `json:"policyName"`
	MachineState NUMANodeMap                `json:"machineState"`
	Entries      ContainerMemoryAssignments `json:"entries,omitempty"`
	PodEntries   map[string]json.RawMessage `json:"podEntries,omitempty"`
}

// MemoryManagerCheckpoint is the kubelet's v3 checkpoint.
type MemoryManagerCheckpoint struct {
	MemoryManagerCheckpointV1 `json:",inline"`
	Data                      string            `json:"data"`
	DataChecksum              checksum.Checksum `json:"dataChecksum"`
}

// State is what the checkpoint holds.
type State struct {
	PolicyName   string
	MachineState NUMANodeMap
	Entries      ContainerMemoryAssignments
}

func legacyChecksum(cp MemoryManagerCheckpointV1) checksum.Checksum {
	cp.Checksum = 0
	object := strings.Replace(dump.ForHash(&cp), "MemoryManagerCheckpointV1", "MemoryManagerCheckpoint", 1)
	return checksum.Checksum(checksum.Hash(object))
}

// Marshal returns the v3 checkpoint of s.
func Marshal(s State) ([]byte, error) {
	if s.MachineState == nil {
		s.MachineState = NUMANodeMap{}
	}
	if s.Entries == nil {
		s.Entries = ContainerMemoryAssignments{}
	}
	data, err := json.Marshal(MemoryManagerCheckpointData{PolicyName: s.PolicyName, MachineState: s.MachineState, Entries: s.Entries})
	if err != nil {
		return nil, fmt.Errorf("failed to serialize memory manager checkpoint data: %w", err)
	}
	cp := MemoryManagerCheckpoint{
		MemoryManagerCheckpointV1: MemoryManagerCheckpointV1{PolicyName: s.PolicyName, MachineState: s.MachineState, Entries: s.Entries},
		Data:                      string(data),
		DataChecksum:              checksum.New(string(data)),
	}
	cp.Checksum = legacyChecksum(cp.MemoryManagerCheckpointV1)
	return json.Marshal(cp)
}

// Unmarshal parses a v3 or v1 checkpoint and verifies its checksum.
func Unmarshal(blob []byte) (State, error) {
	// Empty, not nil, as the kubelet's (the legacy checksum tells them
	// apart).
	cp := MemoryManagerCheckpoint{MemoryManagerCheckpointV1: MemoryManagerCheckpointV1{MachineState: NUMANodeMap{}, Entries: ContainerMemoryAssignments{}}}
	if err := json.Unmarshal(blob, &cp); err != nil {
		return State{}, fmt.Errorf("failed to deserialize memory manager checkpoint: %w", err)
	}
	if cp.Data != "" || cp.DataChecksum != 0 {
		if err := cp.DataChecksum.Verify(cp.Data); err != nil {
			return State{}, err
		}
		var d MemoryManagerCheckpointData
		if err := json.Unmarshal([]byte(cp.Data), &d); err != nil {
			return State{}, fmt.Errorf("failed to deserialize memory manager checkpoint data: %w", err)
		}
		if len(d.PodEntries) > 0 {
			return State{}, errors.New("the checkpoint has pod-level memory assignments (PodLevelResourceManagers), which nodekit does not implement")
		}
		return State{PolicyName: d.PolicyName, MachineState: d.MachineState, Entries: d.Entries}, nil
	}
	v := cp.MemoryManagerCheckpointV1
	if v.Checksum != 0 {
		if got := legacyChecksum(v); got != v.Checksum {
			return State{}, fmt.Errorf("checkpoint is corrupted: checksum %d, expected %d", got, v.Checksum)
		}
	}
	return State{PolicyName: v.PolicyName, MachineState: v.MachineState, Entries: v.Entries}, nil
}
