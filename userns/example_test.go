package userns_test

import (
	"context"
	"fmt"
	"os"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/userns"
)

// A pod with hostUsers: false gets 65,536 host IDs of its own, kept in its
// directory; a second Manager over the same directory (an agent restarted)
// gives it the same ones.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "pods")
	defer os.RemoveAll(dir)
	opts := userns.Options{
		PodsDir: dir,
		MaxPods: 110,
		// The subordinate IDs of the kubelet user, here 65536-8454143.
		Mappings: func(context.Context, uint32) (uint32, uint32, error) { return 65536, 128 * 65536, nil },
		Handlers: func(context.Context) ([]*runtimeapi.RuntimeHandler, error) {
			return []*runtimeapi.RuntimeHandler{{Name: "", Features: &runtimeapi.RuntimeHandlerFeatures{UserNamespaces: true}}}, nil
		},
	}
	m, err := userns.New(ctx, opts)
	if err != nil {
		panic(err)
	}
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "uid-web"}, Spec: v1.PodSpec{HostUsers: ptr.To(false)}}
	ns, err := m.PodUserNamespace(ctx, pod, "")
	if err != nil {
		panic(err)
	}
	restarted, err := userns.New(ctx, opts)
	if err != nil {
		panic(err)
	}
	again, _ := restarted.PodUserNamespace(ctx, pod, "")
	fmt.Println(ns.Mode, ns.Uids[0].ContainerId, ns.Uids[0].Length, again.Uids[0].HostId == ns.Uids[0].HostId)
	// Output: POD 0 65536 true
}
