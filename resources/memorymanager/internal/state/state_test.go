package state

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestRoundTripAndCorruption(t *testing.T) {
	s := State{
		PolicyName:   "Static",
		MachineState: NUMANodeMap{0: {NumberOfAssignments: 1, Cells: []int{0}, MemoryMap: map[v1.ResourceName]*MemoryTable{v1.ResourceMemory: {TotalMemSize: 10, Allocatable: 8, Reserved: 3, Free: 5, SystemReserved: 2}}}},
		Entries:      ContainerMemoryAssignments{"pod": {"c": {{NUMAAffinity: []int{0}, Type: v1.ResourceMemory, Size: 3}}}},
	}
	blob, err := Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unmarshal(blob)
	if err != nil {
		t.Fatal(err)
	}
	if got.MachineState[0].MemoryMap[v1.ResourceMemory].Free != 5 || got.Entries["pod"]["c"][0].Size != 3 {
		t.Errorf("read back %+v", got)
	}
	corrupt := strings.Replace(string(blob), `\"free\":5`, `\"free\":6`, 1)
	if corrupt == string(blob) {
		t.Fatal("the test did not corrupt the data")
	}
	if _, err := Unmarshal([]byte(corrupt)); err == nil {
		t.Error("corrupt data read")
	}
}
