package prober

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/runtime/fakecri"
)

// TestExecThroughCRI runs the exec handler against fakecri through the CRI
// client the agent uses, so the exit-code and timeout errors are the real
// ones.
func TestExecThroughCRI(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	img, err := fakecri.NewImage("busybox", 1000)
	if err != nil {
		t.Fatal(err)
	}
	srv := fakecri.New(fakecri.Options{Clock: clk, Images: []*runtimeapi.Image{img}})
	endpoint, stop, err := srv.Start(filepath.Join(t.TempDir(), "cri.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := criclient.NewRemoteRuntimeService(ctx, endpoint, 10*time.Second, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "ns", Uid: "u1"}}
	sb, err := rs.RunPodSandbox(ctx, cfg, "")
	if err != nil {
		t.Fatal(err)
	}
	id, err := rs.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Image:    &runtimeapi.ImageSpec{Image: img.Id},
	}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	srv.SetExecHandler(func(r fakecri.ExecRequest) fakecri.ExecResult {
		switch r.Cmd[0] {
		case "ok":
			return fakecri.ExecResult{Stdout: []byte("fine")}
		case "hang":
			return fakecri.ExecResult{Delay: time.Minute}
		}
		return fakecri.ExecResult{ExitCode: 3, Stdout: []byte("half "), Stderr: []byte("broken")}
	})

	h := NewExecHandler(rs)
	probe := func(cmd string) (Result, string, error) {
		return h.Probe(ctx, &Target{ContainerID: id, Timeout: 2 * time.Second, Container: &v1.Container{},
			Probe: &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{cmd}}}}})
	}
	if res, out, err := probe("ok"); res != Success || out != "fine" || err != nil {
		t.Errorf("exit 0: %s, %q, %v", res, out, err)
	}
	if res, out, err := probe("fail"); res != Failure || out != "half broken" || err != nil {
		t.Errorf("exit 3: %s, %q, %v", res, out, err)
	}
	type answer struct {
		res Result
		out string
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, out, err := probe("hang")
		done <- answer{res, out, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for clk.Waiters() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the exec never waited")
		}
		time.Sleep(time.Millisecond)
	}
	clk.Step(2 * time.Second)
	a := <-done
	if a.res != Failure || !strings.Contains(a.out, "command timed out") || a.err != nil {
		t.Errorf("timeout: %s, %q, %v", a.res, a.out, a.err)
	}
	if err := rs.StopContainer(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	if res, _, err := probe("ok"); res != Unknown || err == nil {
		t.Errorf("stopped container: %s, %v; want a prober error", res, err)
	}
}
