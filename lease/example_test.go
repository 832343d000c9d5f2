package lease_test

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/lease"
)

// A controller creates the node's lease at once and renews it every 10 s
// (plus jitter) on its clock.
func ExampleController_Run() {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", UID: "1234"}})
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	ctrl, err := lease.New(lease.Options{Client: client, NodeName: "node-a", Clock: clk})
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error)
	go func() { done <- ctrl.Run(ctx) }()

	leases := client.CoordinationV1().Leases("kube-node-lease")
	renewedAt := func(want time.Time) wait.ConditionWithContextFunc {
		return func(ctx context.Context) (bool, error) {
			l, err := leases.Get(ctx, "node-a", metav1.GetOptions{})
			// Ready once written at want and the controller waits again.
			return err == nil && l.Spec.RenewTime.Time.Equal(want) && clk.HasWaiters(), nil
		}
	}
	// Created now; then, one interval later, renewed.
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, wait.ForeverTestTimeout, true, renewedAt(clk.Now())); err != nil {
		fmt.Println(err)
		return
	}
	clk.Step(11 * time.Second)
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, wait.ForeverTestTimeout, true, renewedAt(clk.Now())); err != nil {
		fmt.Println(err)
		return
	}
	cancel() // stops Run at once
	fmt.Println("Run returned:", <-done)

	l, err := leases.Get(context.Background(), "node-a", metav1.GetOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("lease %s/%s\n", l.Namespace, l.Name)
	fmt.Println("holder:", *l.Spec.HolderIdentity)
	fmt.Println("duration:", *l.Spec.LeaseDurationSeconds, "s")
	fmt.Println("renewed:", l.Spec.RenewTime.UTC().Format(time.RFC3339))
	owner := l.OwnerReferences[0]
	fmt.Printf("owner: %s %s/%s uid=%s\n", owner.APIVersion, owner.Kind, owner.Name, owner.UID)
	// Output:
	// Run returned: <nil>
	// lease kube-node-lease/node-a
	// holder: node-a
	// duration: 40 s
	// renewed: 2026-01-02T03:04:16Z
	// owner: v1 Node/node-a uid=1234
}
