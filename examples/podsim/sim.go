package main

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/pods"
)

// Annotations that script a simulated pod's containers.
const (
	// RunSecondsAnnotation is how long every container runs before it
	// exits; absent or "0" means until the pod is deleted.
	RunSecondsAnnotation = "podsim.nodekit.io/run-seconds"
	// ExitCodeAnnotation is the code the containers exit with (default 0).
	ExitCodeAnnotation = "podsim.nodekit.io/exit-code"
)

// simulator is a pods.PodBackend that runs no process: every pod gets an IP
// from 10.88.0.0/16 and its containers run at once, for as long as the pod's
// annotations say. It shows what a pod-level backend (a cloud container
// service, a VM per pod) implements; nodekit's loop does the rest.
type simulator struct {
	clock clock.Clock

	mu     sync.Mutex
	pods   map[string]*simPod // by namespace/name
	nextIP netip.Addr
}

type simPod struct {
	pod      *v1.Pod
	ip       string
	started  time.Time
	runFor   time.Duration // 0: forever
	exitCode int32
	// stopped is when DeletePod stopped it; zero while it runs or when
	// it had finished by itself. deleted is set by DeletePod.
	stopped time.Time
	deleted bool
}

var (
	_ pods.PodBackend = (*simulator)(nil)
)

func newSimulator(clk clock.Clock) *simulator {
	return &simulator{clock: clk, pods: map[string]*simPod{}, nextIP: netip.MustParseAddr("10.88.0.2")}
}

func key(namespace, name string) string { return namespace + "/" + name }

// CreatePod starts the pod's containers now.
func (s *simulator) CreatePod(_ context.Context, pod *v1.Pod) error {
	p := &simPod{pod: pod.DeepCopy(), started: s.clock.Now()}
	if v := pod.Annotations[RunSecondsAnnotation]; v != "" {
		secs, err := strconv.Atoi(v)
		if err != nil || secs < 0 {
			return fmt.Errorf("annotation %s=%q: want a whole number of seconds", RunSecondsAnnotation, v)
		}
		p.runFor = time.Duration(secs) * time.Second
	}
	if v := pod.Annotations[ExitCodeAnnotation]; v != "" {
		code, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			return fmt.Errorf("annotation %s=%q: want an exit code", ExitCodeAnnotation, v)
		}
		p.exitCode = int32(code)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p.ip = s.nextIP.String()
	s.nextIP = s.nextIP.Next()
	s.pods[key(pod.Namespace, pod.Name)] = p
	return nil
}

// UpdatePod takes the new spec; the simulated containers keep running.
func (s *simulator) UpdatePod(_ context.Context, pod *v1.Pod) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pods[key(pod.Namespace, pod.Name)]; ok {
		p.pod = pod.DeepCopy()
	}
	return nil
}

// DeletePod stops the containers at once, as if they handled SIGTERM;
// containers that finished keep their exit.
func (s *simulator) DeletePod(_ context.Context, pod *v1.Pod) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pods[key(pod.Namespace, pod.Name)]
	if !ok || p.deleted {
		return nil
	}
	p.deleted = true
	if now := s.clock.Now(); p.runFor == 0 || now.Sub(p.started) < p.runFor {
		p.stopped = now
	}
	return nil
}

// GetPodStatus reports the containers running, or terminated once their
// time is up or the pod was deleted.
func (s *simulator) GetPodStatus(_ context.Context, namespace, name string) (*v1.PodStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pods[key(namespace, name)]
	if !ok {
		return nil, fmt.Errorf("%s/%s: %w", namespace, name, pods.ErrPodNotFound)
	}
	now := s.clock.Now()
	end, code, reason := time.Time{}, p.exitCode, "Completed"
	switch {
	case !p.stopped.IsZero():
		end, code, reason = p.stopped, 143, "Error"
	case p.runFor > 0 && now.Sub(p.started) >= p.runFor:
		end = p.started.Add(p.runFor)
		if code != 0 {
			reason = "Error"
		}
	}
	st := &v1.PodStatus{PodIP: p.ip, PodIPs: []v1.PodIP{{IP: p.ip}}}
	for _, c := range p.pod.Spec.Containers {
		cs := v1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: "podsim://" + c.Image,
			ContainerID: "podsim://" + string(p.pod.UID) + "-" + c.Name,
			Started:     new(bool),
		}
		if end.IsZero() {
			cs.State.Running = &v1.ContainerStateRunning{StartedAt: metav1.NewTime(p.started)}
			*cs.Started, cs.Ready = true, true
		} else {
			cs.State.Terminated = &v1.ContainerStateTerminated{ExitCode: code, Reason: reason,
				StartedAt: metav1.NewTime(p.started), FinishedAt: metav1.NewTime(end), ContainerID: cs.ContainerID}
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	return st, nil
}

// GetPods returns the pods that are not deleted.
func (s *simulator) GetPods(context.Context) ([]*v1.Pod, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*v1.Pod, 0, len(s.pods))
	for _, p := range s.pods {
		if !p.deleted {
			out = append(out, p.pod.DeepCopy())
		}
	}
	return out, nil
}

// Version names the simulator in the node's status.
func (s *simulator) Version(context.Context) (string, string, error) { return "podsim", "0.1.0", nil }
