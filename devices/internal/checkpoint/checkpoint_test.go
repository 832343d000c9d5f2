package checkpoint

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testdata/kubelet_internal_checkpoint was written by the kubelet's own
// devicemanager/checkpoint package (k8s.io/kubernetes v1.37.2).
func TestKubeletFormat(t *testing.T) {
	kubelet, err := os.ReadFile(filepath.Join("testdata", FileName))
	if err != nil {
		t.Fatal(err)
	}
	entries, registered, err := Read("testdata")
	if err != nil {
		t.Fatalf("read the kubelet's checkpoint: %v", err)
	}
	if len(entries) != 1 || entries[0].PodUID != "uid-1" || len(entries[0].DeviceIDs[-1]) != 2 || len(registered["example.com/dev"]) != 4 {
		t.Fatalf("entries %+v registered %v", entries, registered)
	}
	ours, err := Marshal(entries, registered)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ours, kubelet) {
		t.Errorf("nodekit writes\n%s\nthe kubelet writes\n%s", ours, kubelet)
	}
}

func TestCorruptAndMissing(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := Read(dir); err != ErrNotFound {
		t.Errorf("Read of an empty directory = %v, want ErrNotFound", err)
	}
	if err := Write(dir, nil, map[string][]string{"example.com/dev": {"a"}}); err != nil {
		t.Fatal(err)
	}
	if _, reg, err := Read(dir); err != nil || len(reg["example.com/dev"]) != 1 {
		t.Fatalf("Read after Write = %v, %v", reg, err)
	}
	blob, _ := os.ReadFile(filepath.Join(dir, FileName))
	blob = bytes.Replace(blob, []byte(`"a"`), []byte(`"b"`), 1)
	if err := os.WriteFile(filepath.Join(dir, FileName), blob, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("Read of a tampered checkpoint = %v, want a corrupt error", err)
	}
}
