package bench

import (
	"context"
	"net/http"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// A watch whose resource version expired starts over from the current
// state ("") and keeps delivering; any other error ends it.
func TestResumingWatchRestartsAfterGone(t *testing.T) {
	first, second := watch.NewFake(), watch.NewFake()
	var opened []string
	open := func(_ context.Context, rv string) (watch.Interface, error) {
		opened = append(opened, rv)
		if len(opened) == 1 {
			return first, nil
		}
		return second, nil
	}
	w, err := watchResuming(context.Background(), "7", open)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	node := func(name, rv string) *v1.Node {
		return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}}
	}
	go func() {
		first.Add(node("a", "8"))
		first.Error(&metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired})
		second.Add(node("b", "20"))
		second.Error(&metav1.Status{Status: metav1.StatusFailure, Code: http.StatusInternalServerError})
	}()
	var names []string
	timeout := time.After(10 * time.Second)
	for done := false; !done; {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				done = true
				break
			}
			names = append(names, ev.Object.(*v1.Node).Name)
		case <-timeout:
			t.Fatal("the watch neither delivered nor ended")
		}
	}
	if len(names) != 2 || names[0] != "a" || names[1] != "b" {
		t.Errorf("delivered %v, want [a b]", names)
	}
	if len(opened) != 2 || opened[0] != "7" || opened[1] != "" {
		t.Errorf("opened from %q, want [7 \"\"]", opened)
	}
	if w.Err() == nil {
		t.Error("an error other than 410 did not end the watch with an error")
	}
	if w.Restarts() != 1 {
		t.Errorf("Restarts() = %d, want 1", w.Restarts())
	}
}
