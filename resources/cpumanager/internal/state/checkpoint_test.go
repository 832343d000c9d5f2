package state

import (
	"strconv"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"
)

func TestRoundTripAndCorruption(t *testing.T) {
	s := State{PolicyName: "static", DefaultSet: cpuset.New(0, 3), Assignments: map[string]map[string]cpuset.CPUSet{"pod": {"c": cpuset.New(1, 2)}}}
	blob, err := Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unmarshal(blob)
	if err != nil {
		t.Fatal(err)
	}
	if got.PolicyName != "static" || !got.DefaultSet.Equals(s.DefaultSet) || !got.Assignments["pod"]["c"].Equals(cpuset.New(1, 2)) {
		t.Errorf("read back %+v", got)
	}
	corrupt := strings.Replace(string(blob), `\"c\":\"1-2\"`, `\"c\":\"1-3\"`, 1)
	if corrupt == string(blob) {
		t.Fatal("the test did not corrupt the data")
	}
	if _, err := Unmarshal([]byte(corrupt)); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("corrupt data read: %v", err)
	}
}

// A v2 file, as kubelets before 1.36 wrote it (e2e/kubeletparity checks
// the checksum against the kubelet's own code).
func TestReadV2(t *testing.T) {
	v2 := CPUManagerCheckpointV2{PolicyName: "static", DefaultCPUSet: "0-3", Entries: map[string]map[string]string{}}
	v2.Checksum = legacyChecksum(v2)
	blob := []byte(`{"policyName":"static","defaultCpuSet":"0-3","checksum":` + itoa(uint64(v2.Checksum)) + `}`)
	got, err := Unmarshal(blob)
	if err != nil {
		t.Fatal(err)
	}
	if !got.DefaultSet.Equals(cpuset.New(0, 1, 2, 3)) {
		t.Errorf("read %+v", got)
	}
	bad := []byte(`{"policyName":"static","defaultCpuSet":"0-2","checksum":` + itoa(uint64(v2.Checksum)) + `}`)
	if _, err := Unmarshal(bad); err == nil {
		t.Error("a v2 file with a wrong checksum was read")
	}
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }
