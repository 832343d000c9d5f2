package runtime

import (
	"context"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// optionalRPC returns ctx with its logger changed for a call to an RPC the
// runtime may lack (RuntimeConfig and GetContainerEvents, which containerd
// 1.6 answers codes.Unimplemented): cri-client logs an error line for any
// failed call before returning it, and a runtime without an optional RPC is
// healthy, so that line becomes an info line at V(4). The caller reports
// the fallback itself, once; every other error line is left as it is.
func optionalRPC(ctx context.Context) context.Context {
	logger := klog.FromContext(ctx)
	sink := logger.GetSink()
	if sink == nil {
		return ctx
	}
	return klog.NewContext(ctx, logr.New(unimplementedSink{LogSink: sink, v4: logger.V(4)}))
}

// unimplementedSink is optionalRPC's sink: its Error lines for a
// codes.Unimplemented error are Info lines of v4.
type unimplementedSink struct {
	logr.LogSink
	v4 logr.Logger
}

// Init does nothing: the wrapped sink was initialised by its own logger.
func (unimplementedSink) Init(logr.RuntimeInfo) {}

func (s unimplementedSink) Error(err error, msg string, kv ...any) {
	if status.Code(err) == codes.Unimplemented {
		s.v4.Info(msg, append(kv[:len(kv):len(kv)], "err", err)...)
		return
	}
	s.LogSink.Error(err, msg, kv...)
}

func (s unimplementedSink) WithValues(kv ...any) logr.LogSink {
	return unimplementedSink{LogSink: s.LogSink.WithValues(kv...), v4: s.v4.WithValues(kv...)}
}

func (s unimplementedSink) WithName(name string) logr.LogSink {
	return unimplementedSink{LogSink: s.LogSink.WithName(name), v4: s.v4.WithName(name)}
}
