package podresources_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/nodekit/nodekit/podresources"
)

// A Server for the node's active pods, and a monitoring agent's client
// that lists them on the socket. Without a device manager (Devices nil)
// and without CPU and memory managers, the containers hold nothing.
func Example() {
	dir, _ := os.MkdirTemp("", "podresources")
	defer os.RemoveAll(dir)
	pods := []*v1.Pod{{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-web"},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "nginx"}}},
	}}
	s, err := podresources.New(podresources.Options{
		Dir:        filepath.Join(dir, "pod-resources"),
		ActivePods: func() []*v1.Pod { return pods },
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	conn, err := grpc.NewClient("unix://"+s.SocketPath(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := podresourcesv1.NewPodResourcesListerClient(conn)
	callCtx, callCancel := context.WithTimeout(ctx, 10*time.Second)
	defer callCancel()
	// WaitForReady: Run creates the socket in the background.
	resp, err := client.List(callCtx, &podresourcesv1.ListPodResourcesRequest{}, grpc.WaitForReady(true))
	if err != nil {
		panic(err)
	}
	for _, p := range resp.PodResources {
		for _, c := range p.Containers {
			fmt.Printf("%s/%s %s: %d devices, %d CPUs\n", p.Namespace, p.Name, c.Name, len(c.Devices), len(c.CpuIds))
		}
	}
	fmt.Println("socket:", filepath.Base(s.SocketPath()))
	// Output:
	// default/web nginx: 0 devices, 0 CPUs
	// socket: kubelet.sock
}
