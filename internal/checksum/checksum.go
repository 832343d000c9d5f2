// Package checksum is the kubelet checkpoint manager's checksum
// (k8s.io/kubernetes/pkg/kubelet/checkpointmanager/checksum): the FNV-32a
// hash of the object's spew dump (k8s.io/utils/dump.ForHash). The dump
// names the object's types with their package ("state.CPUManagerCheckpoint",
// "checksum.Checksum"), so a checkpoint that embeds a checksum field uses
// Checksum from this package to hash as the kubelet's does.
package checksum

import (
	"fmt"
	"hash/fnv"

	"k8s.io/utils/dump"
)

// Checksum is a checkpoint's checksum, as the kubelet's checksum.Checksum.
type Checksum uint64

// New returns the checksum of v: the FNV-32a hash of dump.ForHash(v).
func New(v any) Checksum {
	return Checksum(Hash(dump.ForHash(v)))
}

// Hash returns the FNV-32a hash of s, for a caller that dumps an object
// itself (the kubelet's legacy checkpoints hash a dump whose type name
// they rewrite).
func Hash(s string) uint64 {
	h := fnv.New32a()
	fmt.Fprint(h, s)
	return uint64(h.Sum32())
}

// Verify returns an error when c is not the checksum of v.
func (c Checksum) Verify(v any) error {
	if got := New(v); got != c {
		return fmt.Errorf("checkpoint is corrupted: checksum %d, expected %d", got, c)
	}
	return nil
}
