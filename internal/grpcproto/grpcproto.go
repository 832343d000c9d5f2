// Package grpcproto replaces gRPC's "proto" codec with one that encodes and
// decodes exactly as gRPC's own (google.golang.org/grpc/encoding/proto) but
// takes the buffers of large messages from a pool of finer sizes.
//
// gRPC's default buffer pool has tiers of 256 B, 4, 16 and 32 KiB and then
// 1 MiB: decoding a message of 33 KiB that arrived in more than one HTTP/2
// frame (a ListPodSandboxStats, ListContainers or ListPodSandbox answer for
// a node with a few tens of pods) takes a 1 MiB buffer, zeroes all of it,
// and returns it to a sync.Pool, which keeps it until two collections pass
// without a Get. A node asks these every 10 s (the eviction manager's stats
// round), about as often as the Go collector runs while the agent is idle:
// measured with 30 pods on the fake runtime, 1.2 MB of a 7.5 MB live heap
// in one heap profile, 80 KB in another 25 s later, and each round needs a
// free MiB of heap. Here every power of two from 32 KiB to 1 MiB is a
// tier, so a buffer is at most twice the message.
//
// The codec is process-wide (gRPC looks codecs up by name): importing this
// package replaces it for every gRPC client and server of the process, so
// only a command imports it (examples/nodeagent), never a library package.
// Messages, wire format and errors are unchanged.
package grpcproto

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

func init() {
	encoding.RegisterCodecV2(codec{})
}

// pool holds the tiers of gRPC's default pool (256 B, 4, 16, 32 KiB, 1 MiB)
// and every power of two between 32 KiB and 1 MiB; larger buffers come
// from its fallback (a sync.Pool of any size), as in gRPC's.
var pool = func() mem.BufferPool {
	p, err := mem.NewBinaryTieredBufferPool(8, 12, 14, 15, 16, 17, 18, 19, 20)
	if err != nil {
		panic(fmt.Sprintf("grpcproto: build the buffer pool: %v", err))
	}
	return p
}()

// codec is gRPC's proto codecV2 with pool instead of mem.DefaultBufferPool.
type codec struct{}

func (codec) Name() string { return grpcproto.Name }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	m := messageOf(v)
	if m == nil {
		return nil, fmt.Errorf("proto: failed to marshal, message is %T, want proto.Message", v)
	}
	size := proto.Size(m)
	// UseCachedSize reuses the Size just computed, as gRPC's codec does.
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := pool.Get(size)
	if _, err := opts.MarshalAppend((*buf)[:0], m); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	m := messageOf(v)
	if m == nil {
		return fmt.Errorf("failed to unmarshal, message is %T, want proto.Message", v)
	}
	buf := data.MaterializeToBuffer(pool)
	defer buf.Free()
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

// messageOf returns v as a protobuf API v2 message, or nil when it is none.
func messageOf(v any) proto.Message {
	switch v := v.(type) {
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(v)
	case protoadapt.MessageV2:
		return v
	}
	return nil
}
