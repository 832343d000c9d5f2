package pods

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// The kubelet's active deadline handler's reason and message.
const (
	ReasonDeadlineExceeded  = "DeadlineExceeded"
	messageDeadlineExceeded = "Pod was active on the node longer than the specified deadline"
)

// activeDeadlineLeft returns how long pod may still run by its
// spec.activeDeadlineSeconds, counted from its status's startTime (the
// status manager's, else the pod's), and whether it has a deadline at all.
// A pod without a start time yet has its whole deadline left.
func activeDeadlineLeft(pod *v1.Pod, prev *v1.PodStatus, now time.Time) (time.Duration, bool) {
	if pod.Spec.ActiveDeadlineSeconds == nil {
		return 0, false
	}
	deadline := time.Duration(*pod.Spec.ActiveDeadlineSeconds) * time.Second
	start := pod.Status.StartTime
	if prev != nil && prev.StartTime != nil {
		start = prev.StartTime
	}
	if start == nil || start.IsZero() {
		return deadline, true
	}
	return deadline - now.Sub(start.Time), true
}

// killForDeadline stops pod for good because it ran past its
// activeDeadlineSeconds, as the kubelet's activeDeadlineHandler: a Normal
// DeadlineExceeded event, and the final status Failed with reason
// DeadlineExceeded.
func (c *Controller) killForDeadline(ctx context.Context, pod *v1.Pod) {
	klog.FromContext(ctx).V(2).Info("Pod exceeded its active deadline; stopping it", "activeDeadlineSeconds", *pod.Spec.ActiveDeadlineSeconds)
	if c.opts.Recorder != nil {
		c.opts.Recorder.Event(pod, v1.EventTypeNormal, ReasonDeadlineExceeded, messageDeadlineExceeded)
	}
	c.mu.Lock()
	if r := c.pods[pod.UID]; r != nil && r.statusFn == nil {
		r.statusFn = func(st *v1.PodStatus) {
			st.Phase = v1.PodFailed
			st.Reason = ReasonDeadlineExceeded
			st.Message = messageDeadlineExceeded
		}
	}
	c.mu.Unlock()
	c.workers.update(ctx, pod, true, false, nil)
}
