package lease_test

import (
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodekit/nodekit/lease"
)

// fakeRegistration is a lease.NodeRegistration; waiting receives a value
// each time the controller asks for the Registered channel (it does so when
// it is about to wait for it).
type fakeRegistration struct {
	ch      chan struct{}
	node    atomic.Pointer[corev1.Node]
	waiting chan struct{}
}

func newFakeRegistration() *fakeRegistration {
	return &fakeRegistration{ch: make(chan struct{}), waiting: make(chan struct{}, 10)}
}

func (f *fakeRegistration) Registered() <-chan struct{} {
	select {
	case f.waiting <- struct{}{}:
	default:
	}
	return f.ch
}

func (f *fakeRegistration) RegisteredNode() *corev1.Node {
	select {
	case <-f.ch:
		return f.node.Load()
	default:
		return nil
	}
}

func (f *fakeRegistration) register(n *corev1.Node) {
	f.node.Store(n)
	close(f.ch)
}

func withRegistration(r lease.NodeRegistration) func(*lease.Options) {
	return func(o *lease.Options) { o.Registration = r }
}

// A registered Node gives the owner reference: no GET of the Node.
func TestRegistrationGivesTheOwner(t *testing.T) {
	reg := newFakeRegistration()
	reg.register(node())
	h := newHarness(t, withRegistration(reg), node())
	h.start()
	h.nextRenewWait()
	h.requireActions("get leases", "create leases")
	if l := h.lease(); len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != nodeUID {
		t.Errorf("ownerReferences = %+v, want the node", l.OwnerReferences)
	}
}

// Before the Node is registered the controller waits for it without a
// request (the kubelet GETs the Node, 404, and retries), then creates the
// lease it found missing without reading it again.
func TestRegistrationWaitedForWithoutRequests(t *testing.T) {
	reg := newFakeRegistration()
	h := newHarness(t, withRegistration(reg)) // the Node does not exist yet
	h.start()
	select {
	case <-reg.waiting:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("the controller did not wait for the registration")
	}
	h.requireActions("get leases")

	if err := h.client.Tracker().Add(node()); err != nil {
		t.Fatal(err)
	}
	reg.register(node())
	h.nextRenewWait()
	h.requireActions("create leases")
	h.requireRenewedNow()
	if l := h.lease(); len(l.OwnerReferences) != 1 || l.OwnerReferences[0].UID != nodeUID {
		t.Errorf("ownerReferences = %+v, want the node", l.OwnerReferences)
	}
}

// A lease that appeared while the controller waited (CREATE answered
// AlreadyExists) is read and renewed.
func TestRegistrationCreateAlreadyExistsReadsTheLease(t *testing.T) {
	reg := newFakeRegistration()
	h := newHarness(t, withRegistration(reg), node())
	h.start()
	select {
	case <-reg.waiting:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("the controller did not wait for the registration")
	}
	h.requireActions("get leases")

	existing := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Namespace: corev1.NamespaceNodeLease}}
	if err := h.client.Tracker().Add(existing); err != nil {
		t.Fatal(err)
	}
	reg.register(node())
	h.nextRenewWait()
	h.requireActions("create leases", "get leases", "update leases")
	h.requireRenewedNow()
}
