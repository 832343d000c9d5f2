package nodeshutdown_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/nodeshutdown"
)

// preemptionNotice is an embedder's Source: a cloud's spot-instance
// preemption notice, here a channel.
type preemptionNotice chan struct{}

func (p preemptionNotice) Watch(ctx context.Context, handle func(context.Context, bool)) error {
	select {
	case <-ctx.Done():
	case <-p:
		handle(ctx, true)
		<-ctx.Done()
	}
	return nil
}

// A node with a 30 s shutdown grace period, 10 s of it for critical pods,
// learns of its shutdown from a preemption notice: the regular pod is
// killed first with 20 s, the critical one then with 10 s, both with the
// kubelet's final status, and new pods are rejected.
func Example() {
	pod := func(name string, priority int32) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: v1.PodSpec{Priority: ptr.To(priority)}}
	}
	active := []*v1.Pod{pod("coredns", 2000000000), pod("web", 0)}

	var mu sync.Mutex
	killed := make(chan struct{})
	notice := make(preemptionNotice)
	m, err := nodeshutdown.New(nodeshutdown.Options{
		GracePeriod:             30 * time.Second,
		GracePeriodCriticalPods: 10 * time.Second,
		Sources:                 []nodeshutdown.Source{notice},
		ActivePods:              func() []*v1.Pod { return active },
		KillPod: func(_ context.Context, pod *v1.Pod, grace *int64, statusFn func(*v1.PodStatus)) error {
			var st v1.PodStatus
			statusFn(&st)
			mu.Lock()
			defer mu.Unlock()
			fmt.Printf("killed %s with %ds: %s %s\n", pod.Name, *grace, st.Phase, st.Reason)
			if pod.Name == "coredns" {
				close(killed)
			}
			return nil
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.Run(ctx)
	}()
	notice <- struct{}{}
	<-killed
	fmt.Println("ready:", m.ShutdownStatus())
	_, reason, message := m.Admit(pod("late", 0))
	fmt.Println(reason+":", message)
	stop()
	<-done
	// Output:
	// killed web with 20s: Failed Terminated
	// killed coredns with 10s: Failed Terminated
	// ready: node is shutting down
	// NodeShutdown: Pod was rejected as the node is shutting down.
}
