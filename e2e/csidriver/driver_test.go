package csidriver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStartNamesATooLongSocketPath: a registration socket too long for a
// unix socket address fails Start with an error naming the path, not the
// kernel's bare "invalid argument", and leaves no server running.
func TestStartNamesATooLongSocketPath(t *testing.T) {
	dir := t.TempDir()
	regDir := filepath.Join(dir, strings.Repeat("r", 100))
	if err := os.MkdirAll(regDir, 0o755); err != nil {
		t.Fatal(err)
	}
	d := New(Options{Name: "csi.test.example", NodeID: "n", DataRoot: filepath.Join(dir, "data"),
		Endpoint: filepath.Join(dir, "csi.sock"), RegistrationDir: regDir})
	err := d.Start()
	if err == nil {
		d.Stop()
		t.Fatal("Start succeeded with a registration socket path over 107 bytes")
	}
	if !strings.Contains(err.Error(), d.RegistrationSocket()) || !strings.Contains(err.Error(), "longer than the 107 bytes") {
		t.Fatalf("Start: %v; want an error naming %s and the limit", err, d.RegistrationSocket())
	}
	if len(d.servers) != 0 {
		t.Fatalf("%d servers left running", len(d.servers))
	}
}
