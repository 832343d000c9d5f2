package fakecri_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/runtime/fakecri"
)

// socketPath returns a socket path in a fresh short directory: t.TempDir can
// exceed the 107 bytes a unix socket path may have.
func socketPath(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fakecri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "cri.sock")
}

type clients struct {
	rt  runtimeapi.RuntimeServiceClient
	img runtimeapi.ImageServiceClient
}

// start serves s on a fresh socket and returns plain gRPC clients for it.
func start(t *testing.T, s *fakecri.Server) clients {
	t.Helper()
	endpoint, stop, err := s.Start(socketPath(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return clients{rt: runtimeapi.NewRuntimeServiceClient(conn), img: runtimeapi.NewImageServiceClient(conn)}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func mustImage(t *testing.T, ref string, size uint64) *runtimeapi.Image {
	t.Helper()
	img, err := fakecri.NewImage(ref, size)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func wantCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Fatalf("error %v: code %v, want %v", err, got, code)
	}
}

func TestVersion(t *testing.T) {
	s := fakecri.New(fakecri.Options{})
	c := start(t, s)
	v, err := c.rt.Version(ctx(t), &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if v.RuntimeName != "fakecri" || v.RuntimeVersion != fakecri.DefaultRuntimeVersion || v.RuntimeApiVersion != "v1" || v.Version != "0.1.0" {
		t.Fatalf("default version: %v", v)
	}
	s.SetVersion("containerd", "v2.1.4")
	v, err = c.rt.Version(ctx(t), &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if v.RuntimeName != "containerd" || v.RuntimeVersion != "v2.1.4" {
		t.Fatalf("version after SetVersion: %v", v)
	}
}

func TestStatus(t *testing.T) {
	s := fakecri.New(fakecri.Options{Features: &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: true}})
	c := start(t, s)
	conditions := func() map[string]*runtimeapi.RuntimeCondition {
		t.Helper()
		resp, err := c.rt.Status(ctx(t), &runtimeapi.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if !resp.GetFeatures().GetSupplementalGroupsPolicy() {
			t.Errorf("features %v, want SupplementalGroupsPolicy", resp.GetFeatures())
		}
		if len(resp.RuntimeHandlers) != 2 || resp.RuntimeHandlers[0].Name != "" || resp.RuntimeHandlers[1].Name != "runc" {
			t.Errorf("handlers %v, want the default handler and runc", resp.RuntimeHandlers)
		}
		m := map[string]*runtimeapi.RuntimeCondition{}
		for _, c := range resp.GetStatus().GetConditions() {
			m[c.Type] = c
		}
		return m
	}
	got := conditions()
	if !got[runtimeapi.RuntimeReady].GetStatus() || !got[runtimeapi.NetworkReady].GetStatus() {
		t.Fatalf("a new server is not ready: %v", got)
	}
	s.SetRuntimeReady(false, "Starting", "still starting")
	s.SetNetworkReady(false, "NetworkPluginNotReady", "cni plugin not initialized")
	got = conditions()
	if rr := got[runtimeapi.RuntimeReady]; rr.Status || rr.Reason != "Starting" || rr.Message != "still starting" {
		t.Errorf("RuntimeReady %v", rr)
	}
	if nr := got[runtimeapi.NetworkReady]; nr.Status || nr.Reason != "NetworkPluginNotReady" || nr.Message != "cni plugin not initialized" {
		t.Errorf("NetworkReady %v", nr)
	}
}

func TestRuntimeConfig(t *testing.T) {
	s := fakecri.New(fakecri.Options{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS})
	c := start(t, s)
	driver := func() runtimeapi.CgroupDriver {
		t.Helper()
		resp, err := c.rt.RuntimeConfig(ctx(t), &runtimeapi.RuntimeConfigRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetLinux().GetCgroupDriver()
	}
	if d := driver(); d != runtimeapi.CgroupDriver_CGROUPFS {
		t.Fatalf("driver %v, want cgroupfs", d)
	}
	s.SetCgroupDriver(runtimeapi.CgroupDriver_SYSTEMD)
	if d := driver(); d != runtimeapi.CgroupDriver_SYSTEMD {
		t.Fatalf("driver %v, want systemd", d)
	}
	if err := s.SetUnimplemented("RuntimeConfig"); err != nil {
		t.Fatal(err)
	}
	_, err := c.rt.RuntimeConfig(ctx(t), &runtimeapi.RuntimeConfigRequest{})
	wantCode(t, err, codes.Unimplemented)
}

func TestImageStatusAndList(t *testing.T) {
	nginx := &runtimeapi.Image{Id: "sha256:1111", RepoTags: []string{"nginx:1.25"}, RepoDigests: []string{"nginx@sha256:" + strings.Repeat("a", 64)}, Size: 100}
	pause := mustImage(t, "registry.k8s.io/pause:3.10", 50)
	s := fakecri.New(fakecri.Options{Images: []*runtimeapi.Image{nginx, pause}})
	c := start(t, s)

	for _, ref := range []string{"nginx:1.25", "docker.io/library/nginx:1.25", "sha256:1111", "nginx@sha256:" + strings.Repeat("a", 64)} {
		resp, err := c.img.ImageStatus(ctx(t), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
		if err != nil {
			t.Fatalf("ImageStatus(%s): %v", ref, err)
		}
		if resp.GetImage().GetId() != "sha256:1111" {
			t.Errorf("ImageStatus(%s) = %v, want nginx", ref, resp.GetImage())
		}
		if got := resp.GetImage().GetRepoTags(); len(got) != 1 || got[0] != "docker.io/library/nginx:1.25" {
			t.Errorf("ImageStatus(%s) tags %v, want the normalized tag", ref, got)
		}
	}
	resp, err := c.img.ImageStatus(ctx(t), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "nginx"}})
	if err != nil || resp.Image != nil {
		t.Errorf("ImageStatus(nginx) = %v, %v; want no image and no error (nginx:latest is absent)", resp.GetImage(), err)
	}
	_, err = c.img.ImageStatus(ctx(t), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "Not A Ref"}})
	wantCode(t, err, codes.InvalidArgument)
	_, err = c.img.ImageStatus(ctx(t), &runtimeapi.ImageStatusRequest{})
	wantCode(t, err, codes.InvalidArgument)

	list, err := c.img.ListImages(ctx(t), &runtimeapi.ListImagesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Images) != 2 {
		t.Fatalf("ListImages: %v, want 2 images", list.Images)
	}
	list, err = c.img.ListImages(ctx(t), &runtimeapi.ListImagesRequest{Filter: &runtimeapi.ImageFilter{Image: &runtimeapi.ImageSpec{Image: "registry.k8s.io/pause:3.10"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Images) != 1 || list.Images[0].Id != pause.Id {
		t.Fatalf("ListImages(pause): %v", list.Images)
	}
	list, err = c.img.ListImages(ctx(t), &runtimeapi.ListImagesRequest{Filter: &runtimeapi.ImageFilter{Image: &runtimeapi.ImageSpec{Image: "busybox"}}})
	if err != nil || len(list.Images) != 0 {
		t.Fatalf("ListImages(busybox) = %v, %v; want none", list.GetImages(), err)
	}
}

func TestPullRemoveAndFsInfo(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	busybox := mustImage(t, "busybox:1.36", 300)
	s := fakecri.New(fakecri.Options{
		Images:            []*runtimeapi.Image{mustImage(t, "pause", 50)},
		Pullable:          []*runtimeapi.Image{busybox},
		Clock:             clk,
		ImageFsMountpoint: "/data/images",
	})
	c := start(t, s)

	pulled, err := c.img.PullImage(ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "docker.io/library/busybox:1.36"}})
	if err != nil {
		t.Fatal(err)
	}
	if pulled.ImageRef != busybox.Id {
		t.Fatalf("PullImage ref %q, want %q", pulled.ImageRef, busybox.Id)
	}
	st, err := c.img.ImageStatus(ctx(t), &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: "busybox:1.36"}})
	if err != nil || st.GetImage().GetId() != busybox.Id {
		t.Fatalf("ImageStatus after pull = %v, %v", st.GetImage(), err)
	}

	_, err = c.img.PullImage(ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox:1.37"}})
	wantCode(t, err, codes.NotFound)
	if !strings.Contains(err.Error(), "docker.io/library/busybox:1.37") {
		t.Errorf("pull error %q does not name the normalized reference", err)
	}
	_, err = c.img.PullImage(ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "bad ref"}})
	wantCode(t, err, codes.InvalidArgument)

	fs, err := c.img.ImageFsInfo(ctx(t), &runtimeapi.ImageFsInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range append(fs.ImageFilesystems, fs.ContainerFilesystems...) {
		if u.FsId.Mountpoint != "/data/images" || u.UsedBytes.Value != 350 || u.InodesUsed.Value != 2 || u.Timestamp != time.Unix(1000, 0).UnixNano() {
			t.Errorf("filesystem usage %v, want /data/images, 350 bytes, 2 images at t=1000s", u)
		}
	}

	for range 2 { // RemoveImage is idempotent.
		if _, err := c.img.RemoveImage(ctx(t), &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: "busybox:1.36"}}); err != nil {
			t.Fatal(err)
		}
	}
	if imgs := s.Images(); len(imgs) != 1 || imgs[0].RepoTags[0] != "docker.io/library/pause:latest" {
		t.Fatalf("images after remove: %v, want only pause", imgs)
	}
}

func TestPullAny(t *testing.T) {
	s := fakecri.New(fakecri.Options{PullAny: true})
	c := start(t, s)
	resp, err := c.img.PullImage(ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "example.com/app:v1"}})
	if err != nil {
		t.Fatal(err)
	}
	want := mustImage(t, "example.com/app:v1", fakecri.PullAnyImageSize)
	if resp.ImageRef != want.Id {
		t.Fatalf("ref %q, want %q", resp.ImageRef, want.Id)
	}
	imgs := s.Images()
	if len(imgs) != 1 || imgs[0].Size != fakecri.PullAnyImageSize || imgs[0].RepoTags[0] != "example.com/app:v1" {
		t.Fatalf("images %v", imgs)
	}
}

func TestTagMovesToNewImage(t *testing.T) {
	s := fakecri.New(fakecri.Options{})
	oldID := s.AddImage(&runtimeapi.Image{Id: "sha256:old", RepoTags: []string{"app:v1", "app:stable"}, Size: 1})
	s.AddImage(&runtimeapi.Image{Id: "sha256:new", RepoTags: []string{"app:stable"}, Size: 1})
	byID := map[string][]string{}
	for _, img := range s.Images() {
		byID[img.Id] = img.RepoTags
	}
	if got := byID[oldID]; len(got) != 1 || got[0] != "docker.io/library/app:v1" {
		t.Errorf("old image tags %v, want only app:v1", got)
	}
	if got := byID["sha256:new"]; len(got) != 1 || got[0] != "docker.io/library/app:stable" {
		t.Errorf("new image tags %v, want app:stable", got)
	}
	s.AddImage(&runtimeapi.Image{Id: "sha256:newer", RepoTags: []string{"app:v1"}, Size: 1})
	for _, img := range s.Images() {
		if img.Id == oldID {
			t.Errorf("image %v is left without references and must be removed", img)
		}
	}
	s.SetImages(nil)
	if imgs := s.Images(); len(imgs) != 0 {
		t.Errorf("images after SetImages(nil): %v", imgs)
	}
}

func TestAddImageDerivesID(t *testing.T) {
	s := fakecri.New(fakecri.Options{})
	id := s.AddImage(&runtimeapi.Image{RepoTags: []string{"nginx"}, Size: 1})
	if want := mustImage(t, "nginx", 1).Id; id != want {
		t.Fatalf("derived id %q, want NewImage's %q", id, want)
	}
}

func TestNewImage(t *testing.T) {
	img := mustImage(t, "nginx", 7)
	if img.RepoTags[0] != "docker.io/library/nginx:latest" || !strings.HasPrefix(img.RepoDigests[0], "docker.io/library/nginx@sha256:") || !strings.HasPrefix(img.Id, "sha256:") || img.Size != 7 {
		t.Fatalf("NewImage(nginx) = %v", img)
	}
	if again := mustImage(t, "docker.io/library/nginx:latest", 7); again.Id != img.Id {
		t.Errorf("ID is not a function of the normalized reference: %q != %q", again.Id, img.Id)
	}
	digested := mustImage(t, "nginx@sha256:"+strings.Repeat("b", 64), 1)
	if len(digested.RepoTags) != 0 || digested.RepoDigests[0] != "docker.io/library/nginx@sha256:"+strings.Repeat("b", 64) {
		t.Errorf("NewImage(digest ref) = %v", digested)
	}
	if _, err := fakecri.NewImage("Bad Ref", 1); err == nil {
		t.Error("NewImage accepted an invalid reference")
	}
}

func TestFaultInjection(t *testing.T) {
	s := fakecri.New(fakecri.Options{})
	c := start(t, s)
	injected := status.Error(codes.Unavailable, "injected")
	if err := s.SetError("Status", injected); err != nil {
		t.Fatal(err)
	}
	_, err := c.rt.Status(ctx(t), &runtimeapi.StatusRequest{})
	wantCode(t, err, codes.Unavailable)
	if _, err := c.rt.Version(ctx(t), &runtimeapi.VersionRequest{}); err != nil {
		t.Fatalf("a fault for Status broke Version: %v", err)
	}
	if err := s.SetError("PullImage", errors.New("disk full")); err != nil {
		t.Fatal(err)
	}
	_, err = c.img.PullImage(ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "x"}})
	wantCode(t, err, codes.Unknown)
	if !strings.Contains(err.Error(), "disk full") {
		t.Errorf("error %v does not carry the injected message", err)
	}
	if err := s.SetError("Status", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.rt.Status(ctx(t), &runtimeapi.StatusRequest{}); err != nil {
		t.Fatalf("Status after clearing the fault: %v", err)
	}
	if n := s.Calls("Status"); n != 2 {
		t.Errorf("Calls(Status) = %d, want 2 (failed calls count)", n)
	}
	if err := s.SetError("NoSuchMethod", injected); err == nil {
		t.Error("SetError accepted an unknown method")
	}
	if err := s.SetUnimplemented("Nope"); err == nil {
		t.Error("SetUnimplemented accepted an unknown method")
	}
}

func TestReplyRewriter(t *testing.T) {
	s := fakecri.New(fakecri.Options{})
	c := start(t, s)
	s.SetReplyRewriter(func(method string, _ any, reply proto.Message) (proto.Message, error) {
		switch r := reply.(type) {
		case *runtimeapi.VersionResponse:
			r.RuntimeName = "rewritten"
		case *runtimeapi.StatusResponse:
			return nil, status.Error(codes.DataLoss, "rewritten "+method)
		}
		return reply, nil
	})
	v, err := c.rt.Version(ctx(t), &runtimeapi.VersionRequest{})
	if err != nil || v.RuntimeName != "rewritten" {
		t.Fatalf("Version = %v, %v; want the rewritten name", v, err)
	}
	_, err = c.rt.Status(ctx(t), &runtimeapi.StatusRequest{})
	wantCode(t, err, codes.DataLoss)
	s.SetReplyRewriter(nil)
	if v, err := c.rt.Version(ctx(t), &runtimeapi.VersionRequest{}); err != nil || v.RuntimeName != fakecri.DefaultRuntimeName {
		t.Fatalf("Version without the rewriter = %v, %v; want %s (the fake's state untouched)", v, err, fakecri.DefaultRuntimeName)
	}
}

func TestUnimplementedRPCs(t *testing.T) {
	// The streaming RPCs are not faked; Options.Unimplemented emulates an
	// older runtime.
	c := start(t, fakecri.New(fakecri.Options{Unimplemented: []string{"GetContainerEvents", "RuntimeConfig"}}))
	_, err := c.rt.Exec(ctx(t), &runtimeapi.ExecRequest{})
	wantCode(t, err, codes.Unimplemented)
	_, err = c.rt.RuntimeConfig(ctx(t), &runtimeapi.RuntimeConfigRequest{})
	wantCode(t, err, codes.Unimplemented)
	stream, err := c.rt.GetContainerEvents(ctx(t), &runtimeapi.GetEventsRequest{})
	if err == nil {
		_, err = stream.Recv()
	}
	wantCode(t, err, codes.Unimplemented)
}

func TestInvalidOptions(t *testing.T) {
	s := fakecri.New(fakecri.Options{PodCIDRs: []string{"10.0.0.0/33"}, Unimplemented: []string{"Nope"}})
	if s.Err() == nil {
		t.Fatal("Err() = nil for invalid options")
	}
	for _, want := range []string{"10.0.0.0/33", "Nope"} {
		if !strings.Contains(s.Err().Error(), want) {
			t.Errorf("Err() = %v, does not mention %q", s.Err(), want)
		}
	}
	c := start(t, s)
	_, err := c.rt.Version(ctx(t), &runtimeapi.VersionRequest{})
	wantCode(t, err, codes.InvalidArgument)
}

func TestServeStopsOnCancelAndRemovesSocket(t *testing.T) {
	path := socketPath(t)
	s := fakecri.New(fakecri.Options{})
	serveCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(serveCtx, path) }()

	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// WaitForReady: the socket may not exist yet when the first call goes out.
	if _, err := runtimeapi.NewRuntimeServiceClient(conn).Version(ctx(t), &runtimeapi.VersionRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve returned %v after cancel, want nil", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket still there after Serve returned: %v", err)
	}
}

func TestServeReplacesStaleSocket(t *testing.T) {
	path := socketPath(t)
	s := fakecri.New(fakecri.Options{})
	_, stop, err := s.Start(path)
	if err != nil {
		t.Fatal(err)
	}
	// Leave the socket file behind as a crashed process would.
	if err := os.Link(path, path+".stale"); err != nil {
		t.Fatal(err)
	}
	stop()
	stop() // stop is idempotent
	if err := os.Rename(path+".stale", path); err != nil {
		t.Fatal(err)
	}
	_, stop, err = s.Start(path)
	if err != nil {
		t.Fatalf("Start over a stale socket: %v", err)
	}
	stop()
}

func TestServeRejectsBadPaths(t *testing.T) {
	s := fakecri.New(fakecri.Options{})
	file := socketPath(t)
	if err := os.WriteFile(file, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{
		"empty":      "",
		"too long":   "/tmp/" + strings.Repeat("x", 120) + ".sock",
		"not socket": file,
		"no dir":     filepath.Join(filepath.Dir(file), "missing", "cri.sock"),
	} {
		t.Run(name, func(t *testing.T) {
			if err := s.Serve(context.Background(), path); err == nil {
				t.Fatalf("Serve(%q) succeeded", path)
			}
			if _, _, err := s.Start(path); err == nil {
				t.Fatalf("Start(%q) succeeded", path)
			}
		})
	}
	if data, err := os.ReadFile(file); err != nil || string(data) != "data" {
		t.Fatalf("a regular file at the socket path was touched: %q, %v", data, err)
	}
}

func TestConcurrentUse(t *testing.T) {
	s := fakecri.New(fakecri.Options{PullAny: true})
	c := start(t, s)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 10 {
				ref := fmt.Sprintf("app%d:v%d", i, j)
				if _, err := c.img.PullImage(ctx(t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil {
					errs <- err
					return
				}
				if _, err := c.img.ListImages(ctx(t), &runtimeapi.ListImagesRequest{}); err != nil {
					errs <- err
					return
				}
				s.SetRuntimeReady(j%2 == 0, "", "")
				if _, err := c.rt.Status(ctx(t), &runtimeapi.StatusRequest{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := len(s.Images()); n != 80 {
		t.Fatalf("%d images after 80 distinct pulls", n)
	}
}
