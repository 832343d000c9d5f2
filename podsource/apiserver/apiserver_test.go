package apiserver_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podsource/apiserver"
)

const nodeName = "node-a"

func newPod(ns, name, uid, node string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)},
		Spec:       v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "c", Image: "busybox"}}},
	}
}

// run starts a Config over one API server source and returns it.
func run(t *testing.T, opts apiserver.Options) *podsource.Config {
	t.Helper()
	src, err := apiserver.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := podsource.New(podsource.Options{Sources: []podsource.Source{src}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cfg.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		case <-time.After(wait.ForeverTestTimeout):
			t.Error("Run did not return")
		}
	})
	return cfg
}

func next(t *testing.T, cfg *podsource.Config, op podsource.Op, names ...string) podsource.Update {
	t.Helper()
	select {
	case u := <-cfg.Updates():
		var got []string
		for _, p := range u.Pods {
			got = append(got, p.Namespace+"/"+p.Name)
		}
		if u.Op != op || u.Source != "api" || strings.Join(got, ",") != strings.Join(names, ",") {
			t.Fatalf("update = %v %s %v, want %v api %v", u.Op, u.Source, got, op, names)
		}
		return u
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatalf("no %v update", op)
		return podsource.Update{}
	}
}

func TestPodLifecycleThroughTheSource(t *testing.T) {
	client := fake.NewClientset(
		newPod("default", "mine", "uid-1", nodeName),
		newPod("default", "elsewhere", "uid-2", "node-b"),
		newPod("default", "unscheduled", "uid-3", ""),
	)
	cfg := run(t, apiserver.Options{Client: client, NodeName: nodeName})
	ctx := context.Background()
	pods := client.CoreV1().Pods("kube-system")

	// Only the node's pods, in all namespaces.
	u := next(t, cfg, podsource.OpAdd, "default/mine")
	if u.Pods[0].Annotations[podsource.ConfigSourceAnnotationKey] != "api" {
		t.Errorf("annotations = %v", u.Pods[0].Annotations)
	}
	if !cfg.AllReady() {
		// AllReady may lag the receive by a moment.
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, wait.ForeverTestTimeout, true,
			func(context.Context) (bool, error) { return cfg.AllReady(), nil }); err != nil {
			t.Fatal("not ready after the first snapshot")
		}
	}

	p, err := pods.Create(ctx, newPod("kube-system", "dns", "uid-4", nodeName), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	next(t, cfg, podsource.OpAdd, "kube-system/dns")

	p.Status.Phase = v1.PodRunning
	if p, err = pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	u = next(t, cfg, podsource.OpReconcile, "kube-system/dns")
	if u.Pods[0].Status.Phase != v1.PodRunning {
		t.Errorf("reconciled status = %v", u.Pods[0].Status.Phase)
	}

	p.Labels = map[string]string{"v": "2"}
	if p, err = pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	next(t, cfg, podsource.OpUpdate, "kube-system/dns")

	now := metav1.Now()
	p.DeletionTimestamp, p.DeletionGracePeriodSeconds = &now, new(int64)
	*p.DeletionGracePeriodSeconds = 30
	if _, err = pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	u = next(t, cfg, podsource.OpDelete, "kube-system/dns")
	if got := u.Pods[0].DeletionGracePeriodSeconds; got == nil || *got != 30 {
		t.Errorf("grace period = %v", got)
	}

	if err := pods.Delete(ctx, "dns", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	next(t, cfg, podsource.OpRemove, "kube-system/dns")

	// A pod bound elsewhere never shows up.
	if _, err := pods.Create(ctx, newPod("kube-system", "other", "uid-5", "node-b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(ctx, newPod("kube-system", "last", "uid-6", nodeName), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	next(t, cfg, podsource.OpAdd, "kube-system/last")
}

func TestListAndWatchUseTheNodeFieldSelector(t *testing.T) {
	client := fake.NewClientset()
	cfg := run(t, apiserver.Options{Client: client, NodeName: nodeName})
	next(t, cfg, podsource.OpAdd)
	// The requests the reflector made, once it watches.
	var got []string
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, wait.ForeverTestTimeout, true,
		func(context.Context) (bool, error) {
			got = got[:0]
			for _, a := range client.Actions() {
				switch a := a.(type) {
				case k8stesting.ListAction:
					got = append(got, "list "+a.GetResource().Resource+" ns="+a.GetNamespace()+" "+a.GetListRestrictions().Fields.String())
				case k8stesting.WatchAction:
					got = append(got, "watch "+a.GetResource().Resource+" ns="+a.GetNamespace()+" "+a.GetWatchRestrictions().Fields.String())
				}
			}
			return len(got) == 2, nil
		})
	want := "list pods ns= spec.nodeName=node-a|watch pods ns= spec.nodeName=node-a"
	if err != nil || strings.Join(got, "|") != want {
		t.Errorf("requests = %q, want %q", got, want)
	}
}

func TestWaitsForNodeSync(t *testing.T) {
	client := fake.NewClientset(newPod("default", "mine", "uid-1", nodeName))
	clk := testingclock.NewFakeClock(time.Now())
	var synced atomic.Bool
	cfg := run(t, apiserver.Options{Client: client, NodeName: nodeName, Clock: clk, NodeHasSynced: synced.Load})

	waitForPoll := func() {
		t.Helper()
		if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, wait.ForeverTestTimeout, true,
			func(context.Context) (bool, error) { return clk.HasWaiters(), nil }); err != nil {
			t.Fatal("source is not polling")
		}
	}
	// Polling every NodeSyncPeriod; nothing is listed until the node synced.
	for i := 0; i < 3; i++ {
		waitForPoll()
		if n := len(client.Actions()); n != 0 {
			t.Fatalf("%d API requests before the node synced", n)
		}
		clk.Step(apiserver.NodeSyncPeriod)
	}
	// Step only once the source waits again: a step before its next timer
	// exists would be lost.
	waitForPoll()
	synced.Store(true)
	clk.Step(apiserver.NodeSyncPeriod)
	next(t, cfg, podsource.OpAdd, "default/mine")
}

func TestNewValidates(t *testing.T) {
	client := fake.NewClientset()
	for name, opts := range map[string]apiserver.Options{
		"no client": {NodeName: nodeName},
		"no node":   {Client: client},
		"bad node":  {Client: client, NodeName: "Not_A_Name"},
	} {
		if _, err := apiserver.New(opts); err == nil {
			t.Errorf("%s: New accepted %+v", name, opts)
		}
	}
	src, err := apiserver.New(apiserver.Options{Client: client, NodeName: nodeName})
	if err != nil {
		t.Fatal(err)
	}
	if src.Name() != podsource.APIServerSource {
		t.Errorf("Name = %q", src.Name())
	}
	if n := len(client.Actions()); n != 0 {
		t.Errorf("New made %d API requests", n)
	}
}
