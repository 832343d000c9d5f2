package manifest_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/nodekit/nodekit/podsource/manifest"
)

// refRecorder keeps the objects events are recorded against.
type refRecorder struct {
	record.FakeRecorder
	mu   sync.Mutex
	refs []*v1.ObjectReference
}

func (r *refRecorder) Event(obj runtime.Object, _, _, _ string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refs = append(r.refs, obj.(*v1.ObjectReference))
}

// The reference is asked for at each event, so the node's UID appears once
// the agent knows it, as in the kubelet's node events.
func TestReporterAsksForTheNodeReferenceAtEachEvent(t *testing.T) {
	rec := &refRecorder{}
	ref := manifest.NodeReference("node-a")
	r := manifest.NewReporter(rec, func() *v1.ObjectReference { return ref })
	ctx := context.Background()
	r.Report(ctx, "/etc/kubernetes/manifests/a.yaml", manifest.ReasonInvalid, errors.New("bad"))
	withUID := *ref
	withUID.UID = types.UID("0b7e1e4c-uid")
	ref = &withUID
	r.Report(ctx, "/etc/kubernetes/manifests/b.yaml", manifest.ReasonInvalid, errors.New("bad"))
	if len(rec.refs) != 2 {
		t.Fatalf("%d events, want 2", len(rec.refs))
	}
	first, second := rec.refs[0], rec.refs[1]
	if first.APIVersion != "v1" || first.Kind != "Node" || first.Name != "node-a" || first.UID != "" {
		t.Errorf("first reference %+v: want v1 Node node-a without UID", first)
	}
	if second.UID != "0b7e1e4c-uid" {
		t.Errorf("second reference %+v: want the node's UID", second)
	}

	// No reference: only the log line.
	quiet := manifest.NewReporter(rec, func() *v1.ObjectReference { return nil })
	quiet.Report(ctx, "/etc/kubernetes/manifests/c.yaml", manifest.ReasonInvalid, errors.New("bad"))
	if len(rec.refs) != 2 {
		t.Errorf("an event without a reference was recorded")
	}
}
