// Package protoequal compares API objects by their protobuf encoding, a
// fast first answer to "did anything change" for the objects a node
// compares on every update (pod specs, pod statuses).
package protoequal

import "bytes"

// Message is an API type with gogo-protobuf's generated encoding methods,
// as every type of k8s.io/api has.
type Message interface {
	Size() int
	MarshalToSizedBuffer(dAtA []byte) (int, error)
}

// Same reports whether a and b encode to the same protobuf bytes. The
// generated encoding is deterministic (map keys sorted) and writes every
// field that is set, so equal bytes mean semantically equal objects (a nil
// and an empty slice or map encode alike) in a fraction of reflection's
// time. Different bytes prove nothing (1Gi and 1073741824 are one quantity):
// the caller compares semantically then. An object that fails to encode is
// reported different.
func Same(a, b Message) bool {
	n := a.Size()
	if n != b.Size() {
		return false
	}
	buf := make([]byte, 2*n)
	an, err := a.MarshalToSizedBuffer(buf[:n])
	if err != nil || an != n {
		return false
	}
	bn, err := b.MarshalToSizedBuffer(buf[n:])
	return err == nil && bn == n && bytes.Equal(buf[:n], buf[n:])
}
