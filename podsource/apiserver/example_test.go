package apiserver_test

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podsource/apiserver"
)

// The API server source feeds a podsource.Config with the pods bound to
// the node; a status written by someone else comes back as RECONCILE.
func ExampleSource() {
	client := fake.NewClientset(&v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "1234"},
		Spec:       v1.PodSpec{NodeName: "node-a"},
	})
	src, err := apiserver.New(apiserver.Options{Client: client, NodeName: "node-a"})
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg, err := podsource.New(podsource.Options{Sources: []podsource.Source{src}})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = cfg.Run(ctx) }()

	u := <-cfg.Updates()
	fmt.Println(u.Op, u.Source, u.Pods[0].Namespace+"/"+u.Pods[0].Name)

	// Another writer (here: an eviction) sets the status.
	p, err := client.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	p.Status.Phase = v1.PodFailed
	p.Status.Reason = "Evicted"
	if _, err := client.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	u = <-cfg.Updates()
	fmt.Println(u.Op, u.Pods[0].Name, u.Pods[0].Status.Reason)
	// Output:
	// ADD api default/web
	// RECONCILE web Evicted
}
