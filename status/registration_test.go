package status

import (
	"context"
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The watch gives the Node as registering answered (its UID, which the
// Lease's and CSINode's owner references need) before the watch itself has
// seen it, so that they need not GET it.
func TestNodeWatchRegisteredNode(t *testing.T) {
	var watch *NodeWatch
	h := newHarness(t, func(o *Options) {
		w, err := NewNodeWatch(o.Client, o.NodeName)
		if err != nil {
			t.Fatal(err)
		}
		watch = w // never run: it never sees the Node
		o.Node = w
	})
	h.client.PrependReactor("create", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(*v1.Node).UID = "uid-1"
		return false, nil, nil
	})
	if n := watch.RegisteredNode(); n != nil {
		t.Fatalf("RegisteredNode before Run = %v, want nil", n)
	}
	h.start()
	h.waitRegistered()
	select {
	case <-watch.Registered():
	default:
		t.Fatal("the watch's Registered is not closed after the Reporter registered")
	}
	n := watch.RegisteredNode()
	if n == nil || n.Name != testNode || n.UID != "uid-1" {
		t.Fatalf("RegisteredNode = %+v, want the created node with UID uid-1", n)
	}
	if got := len(h.actions("get")); got != 0 {
		t.Errorf("%d GET requests, want 0", got)
	}
}

// The first status cycle right after registering, the watch not having
// delivered the Node yet, patches from registering's answer instead of
// GETting the Node (the kubelet reads its lister, fails, and GETs).
func TestFirstStatusFromTheRegistration(t *testing.T) {
	h := newHarness(t, nil)
	// The watch lists no Node and never hears of it.
	h.client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &v1.NodeList{}, nil
	})
	h.client.PrependWatchReactor("nodes", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewFake(), nil
	})
	h.start()
	h.waitFor("the first status patch", func() bool { return len(h.actions("patch")) > 0 })
	if got := len(h.actions("get")); got != 0 {
		t.Errorf("%d GETs of the Node before the first status patch, want 0", got)
	}
	if got := h.actions("patch")[0].(k8stesting.PatchAction); got.GetSubresource() != "status" {
		t.Errorf("first patch went to %q, want status", got.GetSubresource())
	}
	if len(h.node().Status.Conditions) == 0 {
		t.Error("the first status patch wrote no conditions")
	}
}

// The Reporter does not wait for the watch's first list (which an API
// server busy with a thousand starting nodes answers seconds late): it
// patches from registering's answer, then from its patch's answer, and
// turns the node Ready as soon as its checks pass, as the kubelet, whose
// first status update does not wait for its informer.
func TestStatusBeforeTheWatchListed(t *testing.T) {
	// The watch lists through a client of its own whose list does not
	// answer during the test (a blocked reactor holds that fake client's
	// lock, so the Reporter's requests go through another).
	watchClient := fake.NewClientset()
	listed := make(chan struct{})
	watchClient.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		<-listed
		return true, &v1.NodeList{}, nil
	})
	w, err := NewNodeWatch(watchClient, testNode)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		_ = w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		close(listed)
		<-watchDone
	})
	h := newHarness(t, func(o *Options) { o.Node = w })
	h.setRuntimeErr(errors.New("runtime not ready"))
	h.start()
	h.waitFor("the first status patch", func() bool { return len(h.actions("patch")) == 1 })
	if ready := findCondition(h.node(), v1.NodeReady); ready == nil || ready.Status == v1.ConditionTrue {
		t.Fatalf("Ready = %+v with the runtime down, want False", ready)
	}
	h.setRuntimeErr(nil)
	h.waitFor("the node to turn Ready", func() bool {
		h.clk.Step(fastReadyInterval) // the fast startup loop's period
		ready := findCondition(h.node(), v1.NodeReady)
		return ready != nil && ready.Status == v1.ConditionTrue
	})
	if w.HasSynced() {
		t.Fatal("the watch listed")
	}
	if got := len(h.actions("get")); got != 0 {
		t.Errorf("%d GETs of the Node, want 0", got)
	}
}

// Registering goes through RegisterClient (the kubelet's main client) and
// the status through Client (its heartbeat client), for a new Node and for
// one that exists and is reconciled.
func TestRegistersWithTheRegisterClient(t *testing.T) {
	existing := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, Labels: map[string]string{v1.LabelHostname: "old-host"}}}
	for name, objects := range map[string][]runtime.Object{"new": nil, "existing": {existing}} {
		t.Run(name, func(t *testing.T) {
			// register shares the harness client's objects but records
			// its own requests.
			register := &fake.Clientset{}
			h := newHarness(t, func(o *Options) {
				register.AddReactor("*", "*", k8stesting.ObjectReaction(o.Client.(*fake.Clientset).Tracker()))
				o.RegisterClient = register
			}, objects...)
			h.start()
			h.waitRegistered()
			h.waitFor("the first status patch", func() bool { return len(h.actions("patch")) > 0 })
			var verbs []string
			patches := 0
			for _, a := range register.Actions() {
				if a.GetResource().Resource != "nodes" {
					t.Errorf("register client: %s %s, want only nodes", a.GetVerb(), a.GetResource().Resource)
				}
				verbs = append(verbs, a.GetVerb())
				if a.GetVerb() == "patch" {
					patches++
				}
			}
			if len(verbs) == 0 || verbs[0] != "create" {
				t.Fatalf("register client's requests %v, want a create first", verbs)
			}
			if want := h.patchCount(patchReasonRegister); patches != want {
				t.Errorf("%d patches through the register client, want its %d reconcile patches", patches, want)
			}
			if name == "existing" && patches == 0 {
				t.Error("the existing Node was not reconciled")
			}
			if n := len(h.actions("create")); n != 0 {
				t.Errorf("%d creates through Client, want 0", n)
			}
		})
	}
}
