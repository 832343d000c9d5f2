package checksum

import "testing"

// The kubelet's checkpoint manager writes this checksum for the data string
// "{}" (allocated_pods_state of a node without pods).
func TestNewMatchesKubelet(t *testing.T) {
	if got := New("{}"); got != Checksum(Hash(`(string){}`)) {
		t.Fatalf("New(\"{}\") = %d, want the hash of its dump", got)
	}
	if err := New("a").Verify("a"); err != nil {
		t.Fatal(err)
	}
	if err := New("a").Verify("b"); err == nil {
		t.Fatal("Verify accepted another object")
	}
}
