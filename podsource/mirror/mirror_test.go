package mirror_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podsource/mirror"
)

const nodeName = "node-a"

func node() *v1.Node {
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}}
}

func static(hash string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "kube-system", Name: "etcd-node-a", UID: types.UID(hash),
			Labels: map[string]string{"component": "etcd"},
			Annotations: map[string]string{
				podsource.ConfigHashAnnotationKey:      hash,
				podsource.ConfigSourceAnnotationKey:    "file",
				podsource.ConfigFirstSeenAnnotationKey: "2026-01-01T00:00:00Z",
			},
		},
		Spec:   v1.PodSpec{NodeName: nodeName, Containers: []v1.Container{{Name: "etcd", Image: "etcd:3.6"}}},
		Status: v1.PodStatus{Phase: v1.PodPending},
	}
}

// newClient returns a mirror Client on a fake clientset that enforces the
// UID precondition of deletions, as the API server does.
func newClient(t *testing.T, known bool, objects ...runtime.Object) (*mirror.Client, *fake.Clientset) {
	t.Helper()
	cs := fake.NewClientset(objects...)
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteAction)
		pre := d.GetDeleteOptions().Preconditions
		if pre == nil || pre.UID == nil {
			return false, nil, nil
		}
		obj, err := cs.Tracker().Get(a.GetResource(), a.GetNamespace(), d.GetName())
		if err != nil {
			return false, nil, nil
		}
		if obj.(*v1.Pod).UID != *pre.UID {
			return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), d.GetName(), errors.New("Precondition failed: UID in precondition"))
		}
		return false, nil, nil
	})
	c, err := mirror.New(mirror.Options{Client: cs, NodeName: nodeName, Node: func() (*v1.Node, bool) {
		if !known {
			return nil, false
		}
		return node(), true
	}})
	if err != nil {
		t.Fatal(err)
	}
	return c, cs
}

func getPod(t *testing.T, cs *fake.Clientset, name string) *v1.Pod {
	t.Helper()
	p, err := cs.CoreV1().Pods("kube-system").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCreate(t *testing.T) {
	c, cs := newClient(t, true)
	s := static("h1")
	if err := c.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	m := getPod(t, cs, "etcd-node-a")
	if m.Annotations[podsource.ConfigMirrorAnnotationKey] != "h1" || m.Annotations[podsource.ConfigHashAnnotationKey] != "h1" ||
		m.Annotations[podsource.ConfigSourceAnnotationKey] != "file" || m.Labels["component"] != "etcd" {
		t.Errorf("metadata %v %v", m.Annotations, m.Labels)
	}
	if m.UID == s.UID {
		t.Error("the mirror pod was sent with the static pod's UID")
	}
	if m.Spec.NodeName != nodeName || m.Spec.Containers[0].Image != "etcd:3.6" {
		t.Errorf("spec %+v", m.Spec)
	}
	want := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: nodeName, UID: "node-uid"}
	if len(m.OwnerReferences) != 1 {
		t.Fatalf("owner references %v", m.OwnerReferences)
	}
	o := m.OwnerReferences[0]
	if o.APIVersion != want.APIVersion || o.Kind != want.Kind || o.Name != want.Name || o.UID != want.UID ||
		o.Controller == nil || !*o.Controller || o.BlockOwnerDeletion != nil {
		t.Errorf("owner reference %+v: NodeRestriction wants controller true and no blockOwnerDeletion", o)
	}
	if _, ok := s.Annotations[podsource.ConfigMirrorAnnotationKey]; ok {
		t.Error("the static pod was modified")
	}

	// Again, with the same hash: already there is success.
	if err := c.Create(context.Background(), s); err != nil {
		t.Errorf("Create of an existing mirror pod = %v", err)
	}
	// Another hash under the name is an error.
	if err := c.Create(context.Background(), static("h2")); !apierrors.IsAlreadyExists(errors.Unwrap(err)) {
		t.Errorf("Create over another version = %v", err)
	}
}

func TestCreateNeedsTheNode(t *testing.T) {
	c, cs := newClient(t, false)
	if c.NodeKnown() {
		t.Error("NodeKnown without a node")
	}
	if known, _ := newClient(t, true); !known.NodeKnown() {
		t.Error("NodeKnown false with a node")
	}
	if err := c.Create(context.Background(), static("h1")); !errors.Is(err, mirror.ErrNodeUnknown) {
		t.Errorf("Create without node = %v", err)
	}
	deleting := node()
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	c2, err := mirror.New(mirror.Options{Client: cs, NodeName: nodeName, Node: func() (*v1.Node, bool) { return deleting, true }})
	if err != nil {
		t.Fatal(err)
	}
	if err := c2.Create(context.Background(), static("h1")); err != nil {
		t.Errorf("Create on a node being deleted = %v", err)
	}
	if n := len(cs.Actions()); n != 0 {
		t.Errorf("%d API calls without a usable node", n)
	}
}

func TestDelete(t *testing.T) {
	existing := static("h1")
	existing.UID = "mirror-uid"
	c, cs := newClient(t, true, existing)
	ctx := context.Background()

	gone, err := c.Delete(ctx, "kube-system", "etcd-node-a", "other-uid")
	if gone || err != nil {
		t.Errorf("Delete with another UID = %v, %v", gone, err)
	}
	getPod(t, cs, "etcd-node-a")

	gone, err = c.Delete(ctx, "kube-system", "etcd-node-a", "mirror-uid")
	if !gone || err != nil {
		t.Errorf("Delete = %v, %v", gone, err)
	}
	d := cs.Actions()[len(cs.Actions())-1].(k8stesting.DeleteAction)
	opts := d.GetDeleteOptions()
	if opts.GracePeriodSeconds == nil || *opts.GracePeriodSeconds != 0 || opts.Preconditions == nil || *opts.Preconditions.UID != "mirror-uid" {
		t.Errorf("delete options %+v", opts)
	}
	gone, err = c.Delete(ctx, "kube-system", "etcd-node-a", "mirror-uid")
	if !gone || err != nil {
		t.Errorf("Delete of a missing pod = %v, %v", gone, err)
	}
	cs.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("boom")
	})
	if _, err := c.Delete(ctx, "kube-system", "etcd-node-a", ""); err == nil || !strings.Contains(err.Error(), "kube-system/etcd-node-a: boom") {
		t.Errorf("Delete error = %v", err)
	}
}

func TestDecide(t *testing.T) {
	now := metav1.Now()
	mirrorOf := func(hash string) *v1.Pod {
		m := static(hash)
		m.UID = "m"
		m.Annotations[podsource.ConfigMirrorAnnotationKey] = hash
		return m
	}
	deleting := mirrorOf("h1")
	deleting.DeletionTimestamp = &now
	apiPod := static("h1")
	apiPod.Annotations[podsource.ConfigSourceAnnotationKey] = "api"
	for name, tc := range map[string]struct {
		static, mirror *v1.Pod
		terminating    bool
		want           mirror.Action
	}{
		"no mirror":       {static("h1"), nil, false, mirror.Create},
		"current":         {static("h1"), mirrorOf("h1"), false, mirror.None},
		"other hash":      {static("h2"), mirrorOf("h1"), false, mirror.Recreate},
		"being deleted":   {static("h1"), deleting, false, mirror.Recreate},
		"terminating":     {static("h1"), nil, true, mirror.None},
		"terminating old": {static("h2"), mirrorOf("h1"), true, mirror.None},
		"not static":      {apiPod, nil, false, mirror.None},
	} {
		if got := mirror.Decide(tc.static, tc.mirror, tc.terminating); got != tc.want {
			t.Errorf("%s: Decide = %v, want %v", name, got, tc.want)
		}
	}
}

func TestSyncRecreatesAStaleMirrorPod(t *testing.T) {
	old := static("h1")
	old.UID = "old-mirror"
	old.Annotations[podsource.ConfigMirrorAnnotationKey] = "h1"
	c, cs := newClient(t, true, old)
	ctx := context.Background()
	if err := c.Sync(ctx, static("h2"), old, false); err != nil {
		t.Fatal(err)
	}
	var verbs []string
	for _, a := range cs.Actions() {
		verbs = append(verbs, a.GetVerb())
	}
	if strings.Join(verbs, ",") != "delete,create" {
		t.Errorf("calls %v", verbs)
	}
	m := getPod(t, cs, "etcd-node-a")
	if m.Annotations[podsource.ConfigMirrorAnnotationKey] != "h2" || m.UID == "old-mirror" {
		t.Errorf("mirror pod %s with hash %q", m.UID, m.Annotations[podsource.ConfigMirrorAnnotationKey])
	}

	// A stale view: the mirror pod under the name has another UID than the
	// one the loop saw. Nothing is deleted, nothing created.
	cs.ClearActions()
	stale := old.DeepCopy()
	stale.UID = "someone-else"
	if err := c.Sync(ctx, static("h3"), stale, false); err != nil {
		t.Fatal(err)
	}
	if verbs := cs.Actions(); len(verbs) != 1 || verbs[0].GetVerb() != "delete" {
		t.Errorf("calls %v", verbs)
	}
	if got := getPod(t, cs, "etcd-node-a"); got.Annotations[podsource.ConfigMirrorAnnotationKey] != "h2" {
		t.Error("the mirror pod was replaced through a stale view")
	}
}

func TestDeleteOrphans(t *testing.T) {
	a, b := static("h1"), static("h2")
	a.Name, a.UID = "a", "ua"
	b.Name, b.UID = "b", "ub"
	c, cs := newClient(t, true, a, b)
	err := c.DeleteOrphans(context.Background(), []*v1.Pod{a, b}, func(m *v1.Pod) bool { return m.Name == "b" })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("kube-system").Get(context.Background(), "a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("orphan a not deleted: %v", err)
	}
	getPod(t, cs, "b")
}

func TestNewValidates(t *testing.T) {
	cs := fake.NewClientset()
	get := func() (*v1.Node, bool) { return nil, false }
	for name, opts := range map[string]mirror.Options{
		"no client": {NodeName: nodeName, Node: get},
		"no node":   {Client: cs, Node: get},
		"no getter": {Client: cs, NodeName: nodeName},
	} {
		if _, err := mirror.New(opts); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
