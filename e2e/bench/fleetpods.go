package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// FleetPodsOptions configure RunFleetPods.
type FleetPodsOptions struct {
	// Client creates and watches the pods; give it a QPS above Parallel.
	Client kubernetes.Interface
	// Namespace holds the pods; it must exist with its default
	// ServiceAccount (WaitForNamespace) and hold no other pods.
	Namespace string
	// Nodes are the nodes the pods are bound to, PerNode each.
	Nodes   []string
	PerNode int
	// Image is the pods' one container image, present on every node.
	Image string
	// Parallel is how many create calls run at once (default 50).
	Parallel int
	// Timeout bounds the wait for every pod to run (default 10 minutes).
	Timeout time.Duration
}

// FleetPodsResult are the figures of RunFleetPods.
type FleetPodsResult struct {
	// Pods is how many pods were created.
	Pods int
	// Created is from the first create call to the last one's return.
	Created time.Duration
	// AllRunning is from the first create call to the watch event that
	// showed the last pod Running.
	AllRunning time.Duration
	// WatchRestarts counts the apiserver closing the watch.
	WatchRestarts int
}

// RunFleetPods creates PerNode pods on each of Nodes, bound to their node
// at creation (spec.nodeName, as kwok's benchmarks do: kube-scheduler is not
// what is measured), and waits until every one is Running. The pods are
// left running; DeletePods removes them.
func RunFleetPods(ctx context.Context, opts FleetPodsOptions) (*FleetPodsResult, error) {
	if opts.Client == nil || opts.Namespace == "" || len(opts.Nodes) == 0 || opts.PerNode <= 0 || opts.Image == "" {
		return nil, errors.New("fleet pods: Client, Namespace, Nodes, PerNode and Image are required")
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 50
	}
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	pods := opts.Client.CoreV1().Pods(opts.Namespace)
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("fleet pods: list pods in %s: %w", opts.Namespace, err)
	}
	if len(list.Items) > 0 {
		return nil, fmt.Errorf("fleet pods: namespace %s already holds %d pods", opts.Namespace, len(list.Items))
	}
	w, err := watchResuming(ctx, list.ResourceVersion, func(ctx context.Context, rv string) (watch.Interface, error) {
		w, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			return nil, fmt.Errorf("fleet pods: watch pods in %s from %s: %w", opts.Namespace, rv, err)
		}
		return w, nil
	})
	if err != nil {
		return nil, err
	}
	defer w.Stop()

	total := len(opts.Nodes) * opts.PerNode
	res := &FleetPodsResult{Pods: total}
	began := time.Now()
	created := make(chan error, 1)
	go func() {
		sem := make(chan struct{}, opts.Parallel)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var errs []error
		for i, node := range opts.Nodes {
			for j := range opts.PerNode {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					pod := burstPodSpec(fmt.Sprintf("fleet-%04d-%02d", i+1, j+1), BurstOptions{Namespace: opts.Namespace, Image: opts.Image})
					pod.Spec.NodeSelector = nil
					pod.Spec.NodeName = node
					if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
						mu.Lock()
						errs = append(errs, fmt.Errorf("create pod %s: %w", pod.Name, err))
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
		res.Created = time.Since(began)
		created <- errors.Join(errs...) // after res.Created: the receive orders them
	}()

	running := map[string]bool{}
	createdDone := false
	for len(running) < total {
		select {
		case err := <-created:
			if err != nil {
				return nil, fmt.Errorf("fleet pods: %w", err)
			}
			createdDone = true
		case ev, ok := <-w.Events():
			if !ok {
				return nil, fmt.Errorf("fleet pods: %d of %d Running: watch ended: %v", len(running), total, firstErr(w.Err(), ctx.Err()))
			}
			if pod, ok := ev.Object.(*v1.Pod); ok && ev.Type != watch.Deleted && pod.Status.Phase == v1.PodRunning {
				running[pod.Name] = true
				res.AllRunning = ev.at.Sub(began)
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("fleet pods: %d of %d Running: %w", len(running), total, ctx.Err())
		}
	}
	if !createdDone {
		if err := <-created; err != nil {
			return nil, fmt.Errorf("fleet pods: %w", err)
		}
	}
	res.WatchRestarts = w.Restarts()
	return res, nil
}
