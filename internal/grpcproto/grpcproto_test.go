package grpcproto

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestRegistered(t *testing.T) {
	if c := encoding.GetCodecV2("proto"); c != (codec{}) {
		t.Errorf("gRPC's proto codec is %T, want this package's", c)
	}
}

// TestRoundTrip decodes a message that arrived in several HTTP/2 frames,
// the case that takes a pooled buffer, and encodes one above the pooling
// threshold.
func TestRoundTrip(t *testing.T) {
	in := &runtimeapi.ListContainersResponse{}
	for i := range 300 {
		in.Containers = append(in.Containers, &runtimeapi.Container{
			Id:     fmt.Sprintf("%064d", i),
			Labels: map[string]string{"io.kubernetes.pod.name": fmt.Sprintf("pod-%d", i)},
			Image:  &runtimeapi.ImageSpec{Image: "registry.k8s.io/pause:3.10"},
		})
	}
	c := codec{}
	data, err := c.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	wire := data.Materialize()
	data.Free()
	if len(wire) <= 32<<10 {
		t.Fatalf("the message is %d bytes, want more than 32 KiB", len(wire))
	}
	var frames mem.BufferSlice
	for b := wire; len(b) > 0; {
		n := min(len(b), 16<<10)
		frames = append(frames, mem.SliceBuffer(b[:n]))
		b = b[n:]
	}
	out := &runtimeapi.ListContainersResponse{}
	if err := c.Unmarshal(frames, out); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(in, out) {
		t.Error("the decoded message differs from the encoded one")
	}
	if _, err := c.Marshal("not a message"); err == nil {
		t.Error("Marshal of a string: no error")
	}
	if err := c.Unmarshal(frames, new(int)); err == nil {
		t.Error("Unmarshal into an int: no error")
	}
}

// TestBufferSizes: a message between 32 KiB and 1 MiB gets a buffer of the
// next power of two, not gRPC's 1 MiB.
func TestBufferSizes(t *testing.T) {
	for size, want := range map[int]int{100: 256, 5 << 10: 16 << 10, 33 << 10: 64 << 10, 200 << 10: 256 << 10, 1 << 20: 1 << 20} {
		buf := pool.Get(size)
		if len(*buf) != size || cap(*buf) != want {
			t.Errorf("pool.Get(%d): len %d cap %d, want cap %d", size, len(*buf), cap(*buf), want)
		}
		pool.Put(buf)
	}
}
