package prober_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/record"

	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/prober"
)

// inProcessExec replaces the default exec handler: a pod-level backend
// that runs its "containers" in-process answers exec probes itself.
type inProcessExec struct{}

func (inProcessExec) Kind() prober.Kind { return prober.KindExec }

func (inProcessExec) Probe(_ context.Context, t *prober.Target) (prober.Result, string, error) {
	if t.Probe.Exec.Command[0] == "check-db" {
		return prober.Failure, "db unreachable", nil
	}
	return prober.Success, "", nil
}

// examplePod is a pod whose container is probed for readiness over HTTP at
// port and for liveness with an exec probe, and its status: running as
// containerd://app-1 on pod IP host.
func examplePod(host string, port int) (*v1.Pod, v1.PodStatus) {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "uid-1"},
		Spec: v1.PodSpec{Containers: []v1.Container{{
			Name:  "app",
			Ports: []v1.ContainerPort{{Name: "http", ContainerPort: int32(port)}},
			ReadinessProbe: &v1.Probe{
				ProbeHandler:  v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}},
				PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3,
			},
			LivenessProbe: &v1.Probe{
				ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"check-db"}}},
				PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1,
			},
		}}},
	}
	status := v1.PodStatus{
		Phase: v1.PodRunning,
		PodIP: host,
		ContainerStatuses: []v1.ContainerStatus{{
			Name:        "app",
			ContainerID: "containerd://app-1",
			Started:     new(bool),
			State:       v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: metav1.Now()}},
		}},
	}
	*status.ContainerStatuses[0].Started = true
	return pod, status
}

// waitFor receives updates until done holds.
func waitFor(m *prober.Manager, done func() bool) {
	timeout := time.After(30 * time.Second)
	for !done() {
		select {
		case <-m.Updates():
		case <-timeout:
			fmt.Println("timed out")
			return
		}
	}
}

// Example probes a container over HTTP with the default handler and runs
// its exec probe with an embedder's handler.
func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	host, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(p)
	pod, status := examplePod(host, port)

	recorder := record.NewFakeRecorder(10)
	m, err := prober.New(prober.Options{
		// The agent passes its pod status manager's GetPodStatus.
		PodStatus: func(uid types.UID) (v1.PodStatus, bool) { return status, uid == pod.UID },
		Handlers:  []prober.Handler{inProcessExec{}},
		Recorder:  recorder,
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.Run(ctx)
	}()
	defer func() { cancel(); <-done }()

	m.AddPod(pod)
	waitFor(m, func() bool {
		return m.Readiness("app-1") == podstate.ProbeSuccess && m.Liveness("app-1") == podstate.ProbeFailure
	})
	fmt.Println("readiness:", m.Readiness("app-1"))
	fmt.Println("liveness:", m.Liveness("app-1"))
	fmt.Println(<-recorder.Events)
	// Output:
	// readiness: successful
	// liveness: failed
	// Warning Unhealthy Liveness probe failed: db unreachable
}

// Example_module wires the prober with fx: the graph supplies the pod
// status function, and the embedder's exec handler goes into the
// prober.HandlerGroup value group, where it replaces the default one.
func Example_module() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "ok")
	}))
	defer srv.Close()
	host, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(p)
	pod, status := examplePod(host, port)

	var m *prober.Manager
	app := fx.New(fx.NopLogger,
		prober.Module,
		fx.Supply(prober.PodStatusFunc(func(types.UID) (v1.PodStatus, bool) { return status, true })),
		prober.AsHandler(inProcessExec{}),
		fx.Populate(&m),
	)
	if err := app.Start(context.Background()); err != nil {
		panic(err)
	}
	defer func() { _ = app.Stop(context.Background()) }()

	m.AddPod(pod)
	waitFor(m, func() bool {
		ok, known := m.Ready("app-1")
		return ok && known && m.Liveness("app-1") == podstate.ProbeFailure
	})
	ready, _ := m.Ready("app-1")
	fmt.Println("ready:", ready, "liveness:", m.Liveness("app-1"))
	// Output:
	// ready: true liveness: failed
}
