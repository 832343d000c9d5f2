package podsource

import (
	"context"
	"fmt"

	"github.com/nodekit/nodekit/internal/fxgroup"
	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
)

// Op says what an Update does to the pods it carries. The values are the
// kubelet's pod operations.
type Op int

// The operations a Config emits.
const (
	// OpAdd carries pods new to their source. The first update of every
	// source is an OpAdd, empty when the source has no pods, so a consumer
	// learns the source has reported.
	OpAdd Op = iota
	// OpUpdate carries pods whose spec, labels, (non-local) annotations,
	// deletion timestamp or deletion grace period changed.
	OpUpdate
	// OpDelete carries pods that changed and have a deletion timestamp: a
	// graceful deletion. The pod's containers are to be stopped within its
	// grace period; the object is still there.
	OpDelete
	// OpRemove carries pods that disappeared from their source: the API
	// object is gone (or the file was removed). Nothing is to be written for
	// them any more.
	OpRemove
	// OpReconcile carries pods of which only the status changed: another
	// writer touched it, and the agent, the source of truth of pod status,
	// may have to write its own again.
	OpReconcile
	// OpMirror carries static pods whose mirror pod (their API object, see
	// IsMirrorPod) appeared, changed other than in status, is being deleted
	// or disappeared: the consumer syncs each of them so it can create the
	// mirror pod again, as the kubelet syncs a static pod when its mirror
	// pod changes. Mirror pods themselves are never delivered (see Config).
	// The kubelet has no such operation: it delivers mirror pods with the
	// others and tells them apart in its handlers.
	OpMirror
)

// String returns the kubelet's name of op: ADD, UPDATE, DELETE, REMOVE or
// RECONCILE; MIRROR for OpMirror.
func (op Op) String() string {
	switch op {
	case OpAdd:
		return "ADD"
	case OpUpdate:
		return "UPDATE"
	case OpDelete:
		return "DELETE"
	case OpRemove:
		return "REMOVE"
	case OpReconcile:
		return "RECONCILE"
	case OpMirror:
		return "MIRROR"
	default:
		return fmt.Sprintf("Op(%d)", int(op))
	}
}

// Source names, as the kubelet's. They are the values of the
// kubernetes.io/config.source annotation.
const (
	// APIServerSource names the API server's pods bound to the node.
	APIServerSource = "api"
	// FileSource names static pods from a manifest directory.
	FileSource = "file"
	// HTTPSource names static pods from a manifest URL.
	HTTPSource = "http"
)

// Annotations the Config sets on every pod it emits. They are local: the
// Config ignores them when it compares two versions of a pod, and keeps the
// values it set first.
const (
	// ConfigSourceAnnotationKey names the pod's source ("api", "file",
	// "http").
	ConfigSourceAnnotationKey = "kubernetes.io/config.source"
	// ConfigFirstSeenAnnotationKey is when the agent first saw the pod, in
	// RFC 3339 with nanoseconds, UTC.
	ConfigFirstSeenAnnotationKey = "kubernetes.io/config.seen"
	// ConfigMirrorAnnotationKey marks a mirror pod (the API object of a
	// static pod); its value is the static pod's config hash.
	ConfigMirrorAnnotationKey = v1.MirrorPodAnnotationKey
	// ConfigHashAnnotationKey is a static pod's hash, set by the file and
	// HTTP sources.
	ConfigHashAnnotationKey = "kubernetes.io/config.hash"
)

// Update is one change the Config delivers: Op applied to Pods, all from
// Source (for OpMirror: Source is the source whose snapshot changed the
// mirror pods, Pods the static pods they mirror). The receiver owns Pods;
// they are copies nobody else refers to. Pods is never nil, and empty only
// for a source's first OpAdd.
type Update struct {
	Op     Op
	Pods   []*v1.Pod
	Source string
}

// Source produces the desired pods of one origin (the API server, a
// manifest directory, a URL) as full snapshots.
//
// Name returns the source's name, one of the *Source constants or an
// embedder's own; it must be constant and unique within a Config.
//
// Run sends a snapshot on out whenever the set of pods or one of them
// changes, and at least one snapshot once it knows its pods (an empty one
// when it has none: the agent waits for every source before it cleans up
// pods it does not know). Each snapshot is the complete list of the
// source's pods. The Config does not modify the pods sent and keeps no
// reference to the slice, so a source may send objects shared with its
// cache, but it must not modify a pod after sending it. Run blocks until ctx
// is done and then returns nil; an error means the source cannot work and
// stops the Config. A send on out blocks until the Config takes it; select
// on ctx.Done as well.
type Source interface {
	Name() string
	Run(ctx context.Context, out chan<- []*v1.Pod) error
}

// SourceGroup is the fx value group Module collects pod sources from: add
// a Source to it with AsSource.
const SourceGroup = "pod_sources"

// AsSource returns an fx option that adds a Source, or what an fx
// constructor returns (a Source, optionally with an error), to the
// SourceGroup that Module merges.
func AsSource(source any) fx.Option {
	return fxgroup.Provide(SourceGroup, source, func(s Source) Source { return s })
}
