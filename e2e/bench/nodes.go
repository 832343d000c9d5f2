package bench

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// NodeReady reports whether node's Ready condition is True.
func NodeReady(node *v1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// TimeToReady measures a node agent's startup: it opens a watch on Node
// name, calls start (which launches the agent and may wait for it, as
// cluster.Agent.Start waits for /healthz), and returns the time from just
// before start until the watch received the Node with Ready=True. Events
// are stamped as they arrive, while start may still be waiting. A Node that
// is already Ready when the watch opens is an error: the figure would mean
// nothing. It gives up after timeout.
func TimeToReady(ctx context.Context, client kubernetes.Interface, name string, timeout time.Duration, start func(context.Context) error) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		return 0, fmt.Errorf("node %s: list: %w", name, err)
	}
	for i := range list.Items {
		if NodeReady(&list.Items[i]) {
			return 0, fmt.Errorf("node %s is Ready before its agent starts", name)
		}
	}
	w, err := watchResuming(ctx, list.ResourceVersion, func(ctx context.Context, rv string) (watch.Interface, error) {
		w, err := client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: selector, ResourceVersion: rv})
		if err != nil {
			return nil, fmt.Errorf("node %s: watch from %s: %w", name, rv, err)
		}
		return w, nil
	})
	if err != nil {
		return 0, err
	}
	defer w.Stop()
	began := time.Now()
	if err := start(ctx); err != nil {
		return 0, fmt.Errorf("node %s: start: %w", name, err)
	}
	for {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				return 0, fmt.Errorf("node %s: not Ready: watch ended: %v", name, firstErr(w.Err(), ctx.Err()))
			}
			if node, ok := ev.Object.(*v1.Node); ok && ev.Type != watch.Deleted && NodeReady(node) {
				return ev.at.Sub(began), nil
			}
		case <-ctx.Done():
			return 0, fmt.Errorf("node %s: not Ready within %s: %w", name, timeout, ctx.Err())
		}
	}
}

// ReadyWatch counts the Nodes matching a label selector that turned Ready.
// Open it before starting the agents.
type ReadyWatch struct {
	w     *resumingWatch
	ready map[string]bool
}

// WatchReady opens a watch on the Nodes matching labelSelector; it
// survives the apiserver closing it under load. The caller must Stop it.
func WatchReady(ctx context.Context, client kubernetes.Interface, labelSelector string) (*ReadyWatch, error) {
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: labelSelector})
	if err != nil {
		return nil, fmt.Errorf("list nodes %s: %w", labelSelector, err)
	}
	rw := &ReadyWatch{ready: map[string]bool{}}
	for i := range list.Items {
		if NodeReady(&list.Items[i]) {
			rw.ready[list.Items[i].Name] = true
		}
	}
	rw.w, err = watchResuming(ctx, list.ResourceVersion, func(ctx context.Context, rv string) (watch.Interface, error) {
		w, err := client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{LabelSelector: labelSelector, ResourceVersion: rv})
		if err != nil {
			return nil, fmt.Errorf("watch nodes %s from %s: %w", labelSelector, rv, err)
		}
		return w, nil
	})
	if err != nil {
		return nil, err
	}
	return rw, nil
}

// Wait blocks until n Nodes were Ready at once and returns when the watch
// received the event that made it n, or fails when ctx is done first,
// saying how many were Ready. Not safe for concurrent use.
func (rw *ReadyWatch) Wait(ctx context.Context, n int) (time.Time, error) {
	var at time.Time
	for len(rw.ready) < n {
		select {
		case ev, ok := <-rw.w.Events():
			if !ok {
				return time.Time{}, fmt.Errorf("%d of %d nodes Ready: watch ended: %v", len(rw.ready), n, firstErr(rw.w.Err(), ctx.Err()))
			}
			node, isNode := ev.Object.(*v1.Node)
			switch {
			case !isNode:
			case ev.Type != watch.Deleted && NodeReady(node):
				rw.ready[node.Name] = true
			default:
				delete(rw.ready, node.Name)
			}
			at = ev.at
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d of %d nodes Ready: %w", len(rw.ready), n, ctx.Err())
		}
	}
	if at.IsZero() {
		at = time.Now()
	}
	return at, nil
}

// Restarts is how many times the apiserver closed the watch and it was
// resumed.
func (rw *ReadyWatch) Restarts() int { return rw.w.Restarts() }

// Stop closes the watch.
func (rw *ReadyWatch) Stop() { rw.w.Stop() }

// HoldResult is what Hold saw of a fleet that should stay Ready.
type HoldResult struct {
	// Held is how long it watched.
	Held time.Duration
	// MinReady is the fewest Nodes Ready at once over that time.
	MinReady int
	// Lost are the Nodes that were seen not Ready (or deleted) at least
	// once, in the order first seen.
	Lost []string
}

// Hold watches the Nodes for d after Wait and reports whether any stopped
// being Ready. It fails only when the watch ends or ctx is done before d
// passed. Not safe for concurrent use.
func (rw *ReadyWatch) Hold(ctx context.Context, d time.Duration) (HoldResult, error) {
	res := HoldResult{MinReady: len(rw.ready)}
	lost := map[string]bool{}
	began := time.Now()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-rw.w.Events():
			if !ok {
				res.Held = time.Since(began)
				return res, fmt.Errorf("hold: watch ended after %s: %v", res.Held.Round(time.Second), firstErr(rw.w.Err(), ctx.Err()))
			}
			node, isNode := ev.Object.(*v1.Node)
			switch {
			case !isNode:
			case ev.Type != watch.Deleted && NodeReady(node):
				rw.ready[node.Name] = true
			default:
				delete(rw.ready, node.Name)
				if !lost[node.Name] {
					lost[node.Name] = true
					res.Lost = append(res.Lost, node.Name)
				}
			}
			res.MinReady = min(res.MinReady, len(rw.ready))
		case <-timer.C:
			res.Held = time.Since(began)
			return res, nil
		case <-ctx.Done():
			res.Held = time.Since(began)
			return res, fmt.Errorf("hold: %w", ctx.Err())
		}
	}
}
