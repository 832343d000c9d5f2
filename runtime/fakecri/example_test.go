package fakecri_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/runtime/fakecri"
)

// Example starts a fake runtime whose registry holds one image, talks to it
// with a plain CRI gRPC client, and injects a network failure.
func Example() {
	dir, err := os.MkdirTemp("", "fakecri")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	pause, err := fakecri.NewImage("registry.k8s.io/pause:3.10", 512<<10)
	if err != nil {
		panic(err)
	}
	srv := fakecri.New(fakecri.Options{RuntimeName: "fakecri", RuntimeVersion: "1.2.3", Pullable: []*runtimeapi.Image{pause}})
	endpoint, stop, err := srv.Start(filepath.Join(dir, "cri.sock"))
	if err != nil {
		panic(err)
	}
	defer stop()

	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	rt, img := runtimeapi.NewRuntimeServiceClient(conn), runtimeapi.NewImageServiceClient(conn)
	ctx := context.Background()

	v, err := rt.Version(ctx, &runtimeapi.VersionRequest{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s://%s\n", v.RuntimeName, v.RuntimeVersion)

	if _, err := img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "registry.k8s.io/pause:3.10"}}); err != nil {
		panic(err)
	}
	_, err = img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "nginx"}})
	fmt.Println("pull nginx:", status.Code(err))
	for _, i := range srv.Images() {
		fmt.Println("image:", i.RepoTags[0])
	}

	srv.SetNetworkReady(false, "NetworkPluginNotReady", "cni plugin not initialized")
	resp, err := rt.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		panic(err)
	}
	for _, c := range resp.Status.Conditions {
		fmt.Printf("%s=%t reason:%q\n", c.Type, c.Status, c.Reason)
	}

	if err := srv.SetError("ImageFsInfo", status.Error(codes.Unavailable, "disk gone")); err != nil {
		panic(err)
	}
	_, err = img.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
	fmt.Println("image fs info:", status.Code(err), srv.Calls("ImageFsInfo"))
	// Output:
	// fakecri://1.2.3
	// pull nginx: NotFound
	// image: registry.k8s.io/pause:3.10
	// RuntimeReady=true reason:""
	// NetworkReady=false reason:"NetworkPluginNotReady"
	// image fs info: Unavailable 1
}

// ExampleServer_InProcess calls a fake runtime without a socket, as an
// agent in the same process does through the runtime package's
// Options.RuntimeService and Options.ImageService: the same answers and
// errors as over gRPC, without a connection.
func ExampleServer_InProcess() {
	srv := fakecri.New(fakecri.Options{RuntimeVersion: "1.2.3", PullAny: true})
	rt, img := srv.InProcess()
	defer rt.Close(context.Background())  //nolint:errcheck // never fails
	defer img.Close(context.Background()) //nolint:errcheck // never fails
	ctx := context.Background()

	v, err := rt.Version(ctx, "0.1.0")
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s://%s\n", v.RuntimeName, v.RuntimeVersion)
	ref, err := img.PullImage(ctx, &runtimeapi.ImageSpec{Image: "nginx"}, nil, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println("pulled:", ref == srv.Images()[0].Id)

	if err := srv.SetError("Status", status.Error(codes.Unavailable, "runtime gone")); err != nil {
		panic(err)
	}
	_, err = rt.Status(ctx, false)
	fmt.Println("status:", err)
	// Output:
	// fakecri://1.2.3
	// pulled: true
	// status: rpc error: code = Unavailable desc = runtime gone
}
