package podsource_test

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/podsource"
)

// staticSource is an embedder's own source: it sends one snapshot, then
// another with the pod's status changed, then waits.
type staticSource struct{ pod *v1.Pod }

func (s staticSource) Name() string { return "mine" }

func (s staticSource) Run(ctx context.Context, out chan<- []*v1.Pod) error {
	running := s.pod.DeepCopy()
	running.Status.Phase = v1.PodRunning
	deleting := running.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{}
	for _, snapshot := range [][]*v1.Pod{{s.pod}, {running}, {deleting}, {}} {
		select {
		case out <- snapshot:
		case <-ctx.Done():
			return nil
		}
	}
	<-ctx.Done()
	return nil
}

// A Config turns full snapshots into ADD, RECONCILE (status only), DELETE
// (graceful) and REMOVE updates.
func ExampleConfig() {
	web := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "1234"}}
	cfg, err := podsource.New(podsource.Options{Sources: []podsource.Source{staticSource{web}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- cfg.Run(ctx) }()

	for range 4 {
		u := <-cfg.Updates()
		p := u.Pods[0]
		fmt.Println(u.Op, u.Source, p.Name, p.Status.Phase, p.Annotations[podsource.ConfigSourceAnnotationKey])
	}
	cancel()
	fmt.Println("Run returned:", <-done)
	// Output:
	// ADD mine web  mine
	// RECONCILE mine web Running mine
	// DELETE mine web Running mine
	// REMOVE mine web Running mine
	// Run returned: <nil>
}
