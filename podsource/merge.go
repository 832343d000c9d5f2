package podsource

import (
	"context"
	"maps"
	"reflect"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/internal/protoequal"
)

// localAnnotations are set by the agent, not by a pod's author: they are
// ignored when two versions of a pod are compared, and the first value the
// agent stored wins.
var localAnnotations = [...]string{
	ConfigSourceAnnotationKey,
	ConfigMirrorAnnotationKey,
	ConfigFirstSeenAnnotationKey,
}

func isLocalAnnotation(key string) bool {
	for _, k := range localAnnotations {
		if k == key {
			return true
		}
	}
	return false
}

// merge replaces the pods of source with the snapshot pods and returns the
// updates the change implies, in delivery order. The caller holds mergeMu.
// pods are not modified.
//
// A source sends its whole set of pods on every change, and in a burst
// nearly every snapshot differs from the last in one pod: the stored map
// is changed in place, for the pods that changed, and the sets the merge
// keeps while it walks the snapshot are the Config's, cleared and reused,
// so a snapshot costs no allocation per pod that did not change.
func (c *Config) merge(ctx context.Context, source string, pods []*v1.Pod) []Update {
	logger := klog.FromContext(ctx)
	// Only merge writes pods and mirrors, and mergeMu is held: reading
	// them needs no lock here.
	old, seenBefore := c.pods[source]
	oldMirrors := c.mirrors[source]

	nextMirrors := make(map[types.UID]entry)
	names, uids := c.mergeNames, c.mergeUIDs
	clear(names)
	clear(uids)
	var changed []uidEntry
	set := func(ref *v1.Pod, e entry) { changed = append(changed, uidEntry{uid: ref.UID, entry: e}) }
	var adds, updates, deletes, removes, reconciles, mirrorsChanged []*v1.Pod
	now := c.clock.Now()
	for i, ref := range pods {
		if ref == nil {
			logger.Info("Ignoring a nil pod in a source snapshot", "index", i)
			continue
		}
		name := types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}
		if _, dup := names[name]; dup {
			logger.Info("Ignoring pod with a duplicate name", "pod", klog.KObj(ref), "podUID", ref.UID, "index", i)
			if c.recorder != nil {
				c.recorder.Eventf(ref, v1.EventTypeWarning, "FailedValidation",
					"Error validating pod %s from %s due to duplicate pod name %q, ignoring", klog.KObj(ref), source, ref.Name)
			}
			continue
		}
		names[name] = struct{}{}
		if IsMirrorPod(ref) {
			// A mirror pod is a static pod's API object, not a pod to run:
			// kept apart, it tells the static pod's sync what exists.
			if changed, ok := mergeMirror(oldMirrors, nextMirrors, ref); !ok {
				logger.Info("Ignoring mirror pod with a duplicate UID", "pod", klog.KObj(ref), "podUID", ref.UID, "index", i)
			} else if changed {
				mirrorsChanged = append(mirrorsChanged, ref)
			}
			continue
		}
		if _, dup := uids[ref.UID]; dup {
			logger.Info("Ignoring pod with a duplicate UID", "pod", klog.KObj(ref), "podUID", ref.UID, "index", i)
			continue
		}
		uids[ref.UID] = struct{}{}

		existing, found := old[ref.UID]
		if !found {
			stored := c.annotated(ref, nil, source, now)
			logger.V(4).Info("Receiving a new pod", "pod", klog.KObj(ref), "podUID", ref.UID)
			set(ref, entry{pod: stored, rv: ref.ResourceVersion})
			adds = append(adds, stored)
			continue
		}
		if ref.ResourceVersion != "" && ref.ResourceVersion == existing.rv {
			// The same version as last time: nothing changed.
			continue
		}
		switch {
		case podsDifferSemantically(existing.pod, ref):
			stored := c.annotated(ref, existing.pod, source, now)
			set(ref, entry{pod: stored, rv: ref.ResourceVersion})
			if ref.DeletionTimestamp != nil {
				deletes = append(deletes, stored)
			} else {
				updates = append(updates, stored)
			}
		case !reflect.DeepEqual(&existing.pod.Status, &ref.Status):
			// By pointer: a PodStatus passed by value is copied into an
			// interface, twice per update.
			stored := c.annotated(ref, existing.pod, source, now)
			set(ref, entry{pod: stored, rv: ref.ResourceVersion})
			reconciles = append(reconciles, stored)
		case ref.ResourceVersion != "":
			// Only metadata nobody acts on changed (managed fields, owner
			// references, finalizers): keep the new object, emit nothing.
			set(ref, entry{pod: c.annotated(ref, existing.pod, source, now), rv: ref.ResourceVersion})
		}
	}
	// Every pod of old the snapshot has is in uids, and so are the adds:
	// when the counts agree, the snapshot removed none.
	if len(uids)-len(adds) < len(old) {
		for uid, e := range old {
			if _, ok := uids[uid]; !ok {
				removes = append(removes, e.pod)
			}
		}
	}
	for uid, e := range oldMirrors {
		if _, ok := nextMirrors[uid]; !ok {
			mirrorsChanged = append(mirrorsChanged, e.pod)
		}
	}

	c.podsMu.Lock()
	if old == nil {
		old = make(map[types.UID]entry, len(changed))
		c.pods[source] = old
	}
	for _, u := range changed {
		old[u.uid] = u.entry
	}
	for _, p := range removes {
		delete(old, p.UID)
	}
	c.mirrors[source] = nextMirrors
	mirrored := c.staticPodsOfLocked(mirrorsChanged)
	c.podsMu.Unlock()

	var out []Update
	emit := func(op Op, pods []*v1.Pod) {
		if len(pods) > 0 {
			out = append(out, Update{Op: op, Pods: copyPods(pods), Source: source})
		}
	}
	emit(OpRemove, removes)
	emit(OpAdd, adds)
	emit(OpUpdate, updates)
	emit(OpDelete, deletes)
	if !seenBefore && len(adds)+len(updates)+len(deletes) == 0 {
		out = append(out, Update{Op: OpAdd, Pods: []*v1.Pod{}, Source: source})
	}
	emit(OpReconcile, reconciles)
	emit(OpMirror, mirrored)
	logger.V(4).Info("Merged pod source snapshot", "pods", len(old), "added", len(adds), "updated", len(updates),
		"deleted", len(deletes), "removed", len(removes), "reconciled", len(reconciles),
		"mirrorPods", len(nextMirrors), "mirrorPodsChanged", len(mirrorsChanged))
	return out
}

// uidEntry is a pod's new entry in merge.
type uidEntry struct {
	uid   types.UID
	entry entry
}

// mergeMirror stores the mirror pod ref in next and reports whether it is
// new or changed other than in status compared to old; false ok for a UID
// already in next. ref is stored as sent: sources do not modify what they
// sent.
func mergeMirror(old, next map[types.UID]entry, ref *v1.Pod) (changed, ok bool) {
	if _, dup := next[ref.UID]; dup {
		return false, false
	}
	existing, found := old[ref.UID]
	switch {
	case !found:
		changed = true
	case ref.ResourceVersion != "" && ref.ResourceVersion == existing.rv:
		next[ref.UID] = existing
		return false, true
	default:
		changed = podsDifferSemantically(existing.pod, ref) ||
			existing.pod.Annotations[ConfigMirrorAnnotationKey] != ref.Annotations[ConfigMirrorAnnotationKey]
	}
	next[ref.UID] = entry{pod: ref, rv: ref.ResourceVersion}
	return changed, true
}

// annotated returns a copy of ref carrying the local annotations: the
// values of existing when it has them (the first values win), otherwise
// the source and, for a new pod, the time it was first seen. The copy is
// shallow but for the annotations: it shares the rest with ref, which its
// source no longer modifies (Source), and it is stored read-only, so one
// deep copy per update (copyPods', for the consumer) is enough.
func (c *Config) annotated(ref, existing *v1.Pod, source string, now time.Time) *v1.Pod {
	pod := new(*ref)
	annotations := make(map[string]string, len(ref.Annotations)+len(localAnnotations))
	maps.Copy(annotations, ref.Annotations)
	annotations[ConfigSourceAnnotationKey] = source
	if existing == nil {
		annotations[ConfigFirstSeenAnnotationKey] = now.UTC().Format(time.RFC3339Nano)
	} else {
		for _, k := range localAnnotations {
			if v, ok := existing.Annotations[k]; ok {
				annotations[k] = v
			}
		}
	}
	pod.Annotations = annotations
	return pod
}

// podsDifferSemantically reports whether ref changes what the agent acts on
// compared to existing: spec, labels, deletion timestamp or grace period,
// or an annotation other than the local ones. The specs compare by their
// encoding first (protoequal.Same): nearly every update of a pod (its
// status written, metadata changed) leaves the spec as it was, which
// reflection walked whole.
func podsDifferSemantically(existing, ref *v1.Pod) bool {
	return !(protoequal.Same(&existing.Spec, &ref.Spec) || reflect.DeepEqual(&existing.Spec, &ref.Spec)) ||
		!reflect.DeepEqual(existing.Labels, ref.Labels) ||
		!reflect.DeepEqual(existing.DeletionTimestamp, ref.DeletionTimestamp) ||
		!reflect.DeepEqual(existing.DeletionGracePeriodSeconds, ref.DeletionGracePeriodSeconds) ||
		!annotationsEqual(existing.Annotations, ref.Annotations)
}

// annotationsEqual compares two annotation maps without the local keys.
func annotationsEqual(a, b map[string]string) bool {
	for k, v := range b {
		if isLocalAnnotation(k) {
			continue
		}
		if av, ok := a[k]; !ok || av != v {
			return false
		}
	}
	for k := range a {
		if isLocalAnnotation(k) {
			continue
		}
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}

// copyPods deep-copies pods for a consumer that owns them.
func copyPods(pods []*v1.Pod) []*v1.Pod {
	out := make([]*v1.Pod, len(pods))
	for i, p := range pods {
		out[i] = p.DeepCopy()
	}
	return out
}
