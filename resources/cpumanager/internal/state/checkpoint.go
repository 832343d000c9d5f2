// Package state reads and writes the CPU manager's checkpoint,
// <root-dir>/cpu_manager_state, in the kubelet's formats. The package and
// type names are part of the legacy checksum (the spew dump of
// "state.CPUManagerCheckpoint"), so they must not change.
//
// The kubelet 1.37 writes the v4 format: the v2 fields (policyName,
// defaultCpuSet, entries, checksum) for older kubelets, and data (the JSON
// of CPUManagerCheckpointData) with dataChecksum, which 1.37 verifies. A
// v2 file (kubelets before 1.36) is read as well.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"k8s.io/utils/cpuset"
	"k8s.io/utils/dump"

	"github.com/nodekit/nodekit/internal/checksum"
)

// CPUManagerCheckpointV2 is the kubelet's v2 checkpoint.
type CPUManagerCheckpointV2 struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries,omitempty"`
	Checksum      checksum.Checksum            `json:"checksum"`
}

// ContainerCPUs is a container's CPUs at admission (in-place resize of
// exclusive CPUs, alpha; kept as read).
type ContainerCPUs struct {
	Baseline string `json:"baseline"`
}

// CPUManagerCheckpointData is the v4 payload.
type CPUManagerCheckpointData struct {
	PolicyName    string                              `json:"policyName"`
	DefaultCPUSet string                              `json:"defaultCpuSet"`
	Entries       map[string]map[string]string        `json:"entries,omitempty"`
	PodEntries    map[string]json.RawMessage          `json:"podEntries,omitempty"`
	Baselines     map[string]map[string]ContainerCPUs `json:"baselines,omitempty"`
}

// CPUManagerCheckpoint is the kubelet's v4 checkpoint.
type CPUManagerCheckpoint struct {
	CPUManagerCheckpointV2 `json:",inline"`
	Data                   string            `json:"data"`
	DataChecksum           checksum.Checksum `json:"dataChecksum"`
}

// State is what the checkpoint holds: the policy, the shared pool and the
// containers' exclusive CPUs by pod UID and container name.
type State struct {
	PolicyName  string
	DefaultSet  cpuset.CPUSet
	Assignments map[string]map[string]cpuset.CPUSet
}

// legacyChecksum is the v2 checksum: the dump of the v2 fields with the
// checksum zeroed, named as the kubelet's pre-v3 struct.
func legacyChecksum(cp CPUManagerCheckpointV2) checksum.Checksum {
	cp.Checksum = 0
	object := strings.Replace(dump.ForHash(&cp), "CPUManagerCheckpointV2", "CPUManagerCheckpoint", 1)
	return checksum.Checksum(checksum.Hash(object))
}

// Marshal returns the v4 checkpoint of s.
func Marshal(s State) ([]byte, error) {
	entries := map[string]map[string]string{}
	for pod, cs := range s.Assignments {
		entries[pod] = map[string]string{}
		for c, set := range cs {
			entries[pod][c] = set.String()
		}
	}
	d := CPUManagerCheckpointData{PolicyName: s.PolicyName, DefaultCPUSet: s.DefaultSet.String(), Entries: entries}
	data, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("failed to serialize cpu manager checkpoint data: %w", err)
	}
	cp := CPUManagerCheckpoint{
		CPUManagerCheckpointV2: CPUManagerCheckpointV2{PolicyName: d.PolicyName, DefaultCPUSet: d.DefaultCPUSet, Entries: entries},
		Data:                   string(data),
		DataChecksum:           checksum.New(string(data)),
	}
	cp.Checksum = legacyChecksum(cp.CPUManagerCheckpointV2)
	return json.Marshal(cp)
}

// Unmarshal parses a v4 or v2 checkpoint and verifies its checksum.
func Unmarshal(blob []byte) (State, error) {
	// Empty, not nil, as the kubelet's (the legacy checksum tells them
	// apart).
	cp := CPUManagerCheckpoint{CPUManagerCheckpointV2: CPUManagerCheckpointV2{Entries: map[string]map[string]string{}}}
	if err := json.Unmarshal(blob, &cp); err != nil {
		return State{}, fmt.Errorf("failed to deserialize cpu manager checkpoint: %w", err)
	}
	var d CPUManagerCheckpointData
	switch {
	case cp.Data != "" || cp.DataChecksum != 0:
		if err := cp.DataChecksum.Verify(cp.Data); err != nil {
			return State{}, err
		}
		if err := json.Unmarshal([]byte(cp.Data), &d); err != nil {
			return State{}, fmt.Errorf("failed to deserialize cpu manager checkpoint data: %w", err)
		}
		if len(d.PodEntries) > 0 {
			return State{}, errors.New("the checkpoint has pod-level CPU assignments (PodLevelResourceManagers), which nodekit does not implement")
		}
	default:
		v2 := cp.CPUManagerCheckpointV2
		if v2.Checksum != 0 && legacyChecksum(v2) != v2.Checksum {
			return State{}, fmt.Errorf("checkpoint is corrupted: checksum %d, expected %d", legacyChecksum(v2), v2.Checksum)
		}
		d = CPUManagerCheckpointData{PolicyName: v2.PolicyName, DefaultCPUSet: v2.DefaultCPUSet, Entries: v2.Entries}
	}
	s := State{PolicyName: d.PolicyName, Assignments: map[string]map[string]cpuset.CPUSet{}}
	var err error
	if s.DefaultSet, err = cpuset.Parse(d.DefaultCPUSet); err != nil {
		return State{}, fmt.Errorf("could not parse default CPU set %q: %w", d.DefaultCPUSet, err)
	}
	for pod, cs := range d.Entries {
		s.Assignments[pod] = map[string]cpuset.CPUSet{}
		for c, str := range cs {
			set, err := cpuset.Parse(str)
			if err != nil {
				return State{}, fmt.Errorf("could not parse cpuset %q for container %q in pod %q: %w", str, c, pod, err)
			}
			s.Assignments[pod][c] = set
		}
	}
	return s, nil
}
