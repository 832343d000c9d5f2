package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// BurstOptions configure RunBurst.
type BurstOptions struct {
	// Client creates and watches the pods. Give it a QPS and burst above
	// Pods, or its rate limiter becomes part of the figures.
	Client kubernetes.Interface
	// Namespace holds the pods; it must exist with its default
	// ServiceAccount (WaitForNamespace) and hold no other pods.
	Namespace string
	// NodeName is the node the pods must run on (a nodeSelector on
	// kubernetes.io/hostname; kube-scheduler binds them).
	NodeName string
	// Pods is how many pods are created at once. Required.
	Pods int
	// Image is the pods' one container image, which must be present on the
	// node (pull policy IfNotPresent). Required.
	Image string
	// AgentPID is the node agent's process; its CPU time over the burst is
	// measured. 0 skips that.
	AgentPID int
	// Machine, with AgentPID, accounts for the whole machine's CPU over
	// the same window as the agent's, split by whom (MachineCPU). nil
	// skips that.
	Machine *CPUSources
	// CRIEndpoint is the node's container runtime (unix://…); the runtime's
	// own time for each pod is read from it (CRITimes). Empty skips that.
	CRIEndpoint string
	// RuntimeLog is containerd's log (with CRIEndpoint): each pod's
	// runtime time is also counted from its first RunPodSandbox request
	// (SandboxRequests). Empty skips that.
	RuntimeLog string
	// Timeout bounds the wait for every pod to run (default 5 minutes).
	Timeout time.Duration
}

// BurstResult are the figures of one burst, one sample per pod.
type BurstResult struct {
	// CreateToRunning is from the client's create call to the watch event
	// that showed the pod Running.
	CreateToRunning []time.Duration
	// CreateToBound is from the client's create call to the watch event
	// that showed the pod bound: how the scheduler spread the pods' arrival
	// at the node.
	CreateToBound []time.Duration
	// BoundToRunning is from the watch event that showed the pod bound to
	// the node (spec.nodeName set by the scheduler) to the one that showed
	// it Running: the node agent's share, runtime included.
	BoundToRunning []time.Duration
	// CRI is the runtime's own time per pod (CRITimes); nil without a
	// CRIEndpoint or when a pod's timestamps were missing.
	CRI []time.Duration
	// Overhead is BoundToRunning less CRI, pod by pod: the agent's own
	// share. nil when CRI is.
	Overhead []time.Duration
	// CRIFromRequest is the runtime's time per pod counted from its first
	// RunPodSandbox request (SandboxRequests) to its first container's
	// start: CRI plus what the runtime does before the sandbox's
	// CreatedAt (network namespace, CNI). OverheadFromRequest is
	// BoundToRunning less it. Both nil without a RuntimeLog or when a pod
	// is missing from it.
	CRIFromRequest, OverheadFromRequest []time.Duration
	// Wall is from the first create call to the last pod seen Running.
	Wall time.Duration
	// AgentCPU is the CPU time the agent process used over Wall; 0 without
	// an AgentPID.
	AgentCPU time.Duration
	// Machine is the machine's CPU over the same window, split by whom;
	// nil without BurstOptions.Machine.
	Machine *MachineCPU
	// WatchRestarts counts the times the apiserver closed the watch
	// (it closes watchers it finds slow under load) and it was resumed
	// from the last event seen: events in such a gap are seen late.
	WatchRestarts int
}

// burstPod is what the watch learned about one pod.
type burstPod struct {
	uid            types.UID
	bound, running time.Time
}

// RunBurst creates opts.Pods pods at once (one goroutine each), all with a
// container that sleeps for an hour, and watches them until every one is
// Running. It returns each pod's figures. The pods are left running;
// DeletePods removes them.
func RunBurst(ctx context.Context, opts BurstOptions) (*BurstResult, error) {
	if opts.Client == nil || opts.Namespace == "" || opts.NodeName == "" || opts.Pods <= 0 || opts.Image == "" {
		return nil, errors.New("pod burst: Client, Namespace, NodeName, Pods and Image are required")
	}
	if opts.Machine != nil && (opts.AgentPID == 0 || opts.Machine.RuntimeCgroup == "" || opts.Machine.PodsCgroup == "") {
		return nil, errors.New("pod burst: Machine needs AgentPID, RuntimeCgroup and PodsCgroup")
	}
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	pods := opts.Client.CoreV1().Pods(opts.Namespace)
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("pod burst: list pods in %s: %w", opts.Namespace, err)
	}
	if len(list.Items) > 0 {
		return nil, fmt.Errorf("pod burst: namespace %s already holds %d pods", opts.Namespace, len(list.Items))
	}
	w, err := watchResuming(ctx, list.ResourceVersion, func(ctx context.Context, rv string) (watch.Interface, error) {
		w, err := pods.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			return nil, fmt.Errorf("pod burst: watch pods in %s from %s: %w", opts.Namespace, rv, err)
		}
		return w, nil
	})
	if err != nil {
		return nil, err
	}
	defer w.Stop()

	// The watch loop owns state; each creator writes only its own entry of
	// created, which the loop reads once every creator has reported.
	state := make(map[string]*burstPod, opts.Pods)
	names := make([]string, opts.Pods)
	created := make([]time.Time, opts.Pods)
	for i := range names {
		names[i] = fmt.Sprintf("burst-%03d", i)
		state[names[i]] = &burstPod{}
	}
	var cpuBefore ProcStats
	var machineBefore cpuSample
	if opts.Machine != nil {
		if machineBefore, err = sampleCPU(ctx, opts.Machine, opts.AgentPID); err != nil {
			return nil, fmt.Errorf("pod burst: machine CPU: %w", err)
		}
	}
	if opts.AgentPID != 0 {
		if cpuBefore, err = ReadProcStats(opts.AgentPID); err != nil {
			return nil, fmt.Errorf("pod burst: %w", err)
		}
	}
	began := time.Now()
	createErrs := make(chan error, opts.Pods)
	for i, name := range names {
		go func() {
			pod := burstPodSpec(name, opts)
			created[i] = time.Now()
			_, err := pods.Create(ctx, pod, metav1.CreateOptions{})
			if err != nil {
				err = fmt.Errorf("pod burst: create pod %s/%s: %w", opts.Namespace, name, err)
			}
			createErrs <- err
		}()
	}

	// Take create results and watch events as they come.
	running, creating := 0, opts.Pods
	var last time.Time
	for running < opts.Pods || creating > 0 {
		select {
		case err := <-createErrs:
			creating--
			if err != nil {
				return nil, err
			}
		case ev, ok := <-w.Events():
			if !ok {
				return nil, fmt.Errorf("pod burst: %d of %d pods Running: watch ended: %v", running, opts.Pods, firstErr(w.Err(), ctx.Err()))
			}
			now := ev.at
			pod, isPod := ev.Object.(*v1.Pod)
			if !isPod {
				continue
			}
			st := state[pod.Name]
			if st == nil {
				continue
			}
			st.uid = pod.UID
			if st.bound.IsZero() && pod.Spec.NodeName != "" {
				st.bound = now
			}
			switch {
			case pod.Status.Phase == v1.PodFailed:
				return nil, fmt.Errorf("pod burst: pod %s/%s failed: %s: %s", opts.Namespace, pod.Name, pod.Status.Reason, pod.Status.Message)
			case pod.Status.Phase == v1.PodRunning && st.running.IsZero():
				st.running = now
				running++
				last = now
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("pod burst: %d of %d pods Running on %s within %s: %w", running, opts.Pods, opts.NodeName, opts.Timeout, ctx.Err())
		}
	}

	res := &BurstResult{Wall: last.Sub(began), WatchRestarts: w.Restarts()}
	if opts.AgentPID != 0 {
		after, err := ReadProcStats(opts.AgentPID)
		if err != nil {
			return nil, fmt.Errorf("pod burst: %w", err)
		}
		res.AgentCPU = after.CPU - cpuBefore.CPU
	}
	if opts.Machine != nil {
		machineAfter, err := sampleCPU(ctx, opts.Machine, opts.AgentPID)
		if err != nil {
			return nil, fmt.Errorf("pod burst: machine CPU: %w", err)
		}
		res.Machine = machineCPU(machineBefore, machineAfter)
	}
	var cri map[types.UID]CRISpan
	if opts.CRIEndpoint != "" {
		if cri, err = CRITimes(ctx, opts.CRIEndpoint, opts.Namespace); err != nil {
			return nil, fmt.Errorf("pod burst: %w", err)
		}
	}
	var requested map[types.UID]time.Time
	if opts.CRIEndpoint != "" && opts.RuntimeLog != "" {
		if requested, err = SandboxRequests(opts.RuntimeLog); err != nil {
			return nil, fmt.Errorf("pod burst: %w", err)
		}
	}
	for i, name := range names {
		st := state[name]
		res.CreateToRunning = append(res.CreateToRunning, st.running.Sub(created[i]))
		res.CreateToBound = append(res.CreateToBound, st.bound.Sub(created[i]))
		res.BoundToRunning = append(res.BoundToRunning, st.running.Sub(st.bound))
		span, ok := cri[st.uid]
		if !ok {
			continue
		}
		res.CRI = append(res.CRI, span.Duration())
		res.Overhead = append(res.Overhead, st.running.Sub(st.bound)-span.Duration())
		if at, ok := requested[st.uid]; ok {
			d := span.Started.Sub(at)
			res.CRIFromRequest = append(res.CRIFromRequest, d)
			res.OverheadFromRequest = append(res.OverheadFromRequest, st.running.Sub(st.bound)-d)
		}
	}
	if len(res.CRI) != opts.Pods {
		res.CRI, res.Overhead = nil, nil
	}
	if len(res.CRIFromRequest) != opts.Pods {
		res.CRIFromRequest, res.OverheadFromRequest = nil, nil
	}
	return res, nil
}

// firstErr returns the first non-nil error.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// burstPodSpec is a BestEffort pod with one container sleeping for an
// hour, pinned to the node, without a service account token (no volume to
// set up: the figures are about the agent and the runtime).
func burstPodSpec(name string, opts BurstOptions) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: opts.Namespace, Labels: map[string]string{"app": "nodebench"}},
		Spec: v1.PodSpec{
			NodeSelector:                  map[string]string{v1.LabelHostname: opts.NodeName},
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []v1.Container{{
				Name:            "sleep",
				Image:           opts.Image,
				Command:         []string{"sleep", "3600"},
				ImagePullPolicy: v1.PullIfNotPresent,
			}},
		},
	}
}

// WaitForNamespace creates namespace ns if needed and waits until its
// default ServiceAccount exists (kube-controller-manager creates it), since
// pods cannot be created before.
func WaitForNamespace(ctx context.Context, client kubernetes.Interface, ns string) error {
	_, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", ns, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("namespace %s: default service account: %w", ns, err)
	}
	return nil
}

// DeletePods deletes every pod of namespace ns (grace period 1 s) and waits
// until the node agents removed them all, up to timeout.
func DeletePods(ctx context.Context, client kubernetes.Interface, ns string, timeout time.Duration) error {
	pods := client.CoreV1().Pods(ns)
	err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)}, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("delete pods in %s: %w", ns, err)
	}
	left := -1
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		left = len(list.Items)
		return left == 0, nil
	})
	if err != nil {
		return fmt.Errorf("delete pods in %s: %d left after %s: %w", ns, left, timeout, err)
	}
	return nil
}
