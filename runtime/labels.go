package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"strconv"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/podstate"
)

// Labels and annotations the agent puts on sandboxes and containers. They
// are the kubelet's, so crictl shows POD and NAMESPACE, log collectors find
// pods, and an agent restarted on a node (nodekit's or the kubelet itself)
// recognises the pods it owns.
const (
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelContainerName = "io.kubernetes.container.name"

	AnnotationContainerHash            = "io.kubernetes.container.hash"
	AnnotationRestartCount             = "io.kubernetes.container.restartCount"
	AnnotationTerminationMessagePath   = "io.kubernetes.container.terminationMessagePath"
	AnnotationTerminationMessagePolicy = "io.kubernetes.container.terminationMessagePolicy"
	AnnotationPreStopHandler           = "io.kubernetes.container.preStopHandler"
	AnnotationContainerPorts           = "io.kubernetes.container.ports"
	AnnotationDeletionGracePeriod      = "io.kubernetes.pod.deletionGracePeriod"
	AnnotationTerminationGracePeriod   = "io.kubernetes.pod.terminationGracePeriod"

	// AnnotationContainerResources records the requests and limits a
	// container was created with (JSON), nodekit's own: what it runs with
	// until an in-place resize applies others (the PodManager remembers
	// those; after an agent restart the resize is applied again from
	// these).
	AnnotationContainerResources = "io.nodekit.container.resources"
)

// HashContainer returns the hash of the fields of c whose change makes the
// agent restart the container: its name and image, the only mutable fields
// the kubelet v1.37 hashes. It is recorded in the container's
// io.kubernetes.container.hash annotation, in hex, and equals the kubelet's
// hash of the same container bit for bit, so an agent that replaces a
// kubelet on a node (or a kubelet that replaces an agent) recognises the
// running containers as unchanged and keeps them.
//
// The kubelet's hash is FNV-1a (32 bits) of the text go-spew prints, with
// k8s.io/utils/dump.ForHash's settings, for the JSON of
// {"image":…,"name":…} as a byte slice: "([]uint8)[" then the bytes in
// decimal separated by spaces then "]". HashContainer writes that text
// itself rather than depend on go-spew. e2e/kubeletparity checks it against
// the kubelet's own function.
func HashContainer(c *v1.Container) uint64 {
	// encoding/json writes map keys sorted and escapes <, > and & as the
	// kubelet's json.Marshal does; a map of strings cannot fail to encode.
	data, _ := json.Marshal(map[string]string{"name": c.Name, "image": c.Image})
	buf := make([]byte, 0, len("([]uint8)[]")+4*len(data))
	buf = append(buf, "([]uint8)["...)
	for i, b := range data {
		if i > 0 {
			buf = append(buf, ' ')
		}
		buf = strconv.AppendUint(buf, uint64(b), 10)
	}
	buf = append(buf, ']')
	h := fnv.New32a()
	h.Write(buf)
	return uint64(h.Sum32())
}

// sandboxLabels are the pod's labels plus the pod identity labels.
func sandboxLabels(pod *v1.Pod) map[string]string {
	labels := make(map[string]string, len(pod.Labels)+3)
	maps.Copy(labels, pod.Labels)
	labels[LabelPodName] = pod.Name
	labels[LabelPodNamespace] = pod.Namespace
	labels[LabelPodUID] = string(pod.UID)
	return labels
}

func containerLabels(pod *v1.Pod, c *v1.Container) map[string]string {
	return map[string]string{
		LabelPodName:       pod.Name,
		LabelPodNamespace:  pod.Namespace,
		LabelPodUID:        string(pod.UID),
		LabelContainerName: c.Name,
	}
}

// containerAnnotations records what the agent needs to know about a
// container later, even without its pod: the spec hash, the restart count,
// the termination message settings, the grace periods, the preStop hook,
// the ports and the resources it was created with.
func containerAnnotations(ctx context.Context, pod *v1.Pod, c *v1.Container, restartCount int) map[string]string {
	a := map[string]string{
		AnnotationContainerHash:            strconv.FormatUint(HashContainer(c), 16),
		AnnotationRestartCount:             strconv.Itoa(restartCount),
		AnnotationTerminationMessagePath:   c.TerminationMessagePath,
		AnnotationTerminationMessagePolicy: string(c.TerminationMessagePolicy),
	}
	if pod.DeletionGracePeriodSeconds != nil {
		a[AnnotationDeletionGracePeriod] = strconv.FormatInt(*pod.DeletionGracePeriodSeconds, 10)
	}
	if pod.Spec.TerminationGracePeriodSeconds != nil {
		a[AnnotationTerminationGracePeriod] = strconv.FormatInt(*pod.Spec.TerminationGracePeriodSeconds, 10)
	}
	logger := klog.FromContext(ctx)
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		if raw, err := json.Marshal(c.Lifecycle.PreStop); err != nil {
			logger.Error(err, "Cannot record the preStop hook of a container", "pod", klog.KObj(pod), "container", c.Name)
		} else {
			a[AnnotationPreStopHandler] = string(raw)
		}
	}
	// What the container runs with: pod-level limits stand in for those
	// it does not set, as the kubelet's actuated resources.
	effective := podstate.EffectiveResources(pod.Spec.Resources, &c.Resources)
	applied := v1.ResourceRequirements{Requests: effective.Requests, Limits: effective.Limits}
	if raw, err := json.Marshal(applied); err != nil {
		logger.Error(err, "Cannot record the resources of a container", "pod", klog.KObj(pod), "container", c.Name)
	} else {
		a[AnnotationContainerResources] = string(raw)
	}
	if len(c.Ports) > 0 {
		if raw, err := json.Marshal(c.Ports); err != nil {
			logger.Error(err, "Cannot record the ports of a container", "pod", klog.KObj(pod), "container", c.Name)
		} else {
			a[AnnotationContainerPorts] = string(raw)
		}
	}
	return a
}

// recordedContainer is what a container's labels and annotations say about
// it and its pod.
type recordedContainer struct {
	podName, podNamespace    string
	podUID                   types.UID
	name                     string
	hash                     uint64
	restartCount             int
	terminationMessagePath   string
	terminationMessagePolicy v1.TerminationMessagePolicy
	deletionGracePeriod      *int64
	terminationGracePeriod   *int64
	preStop                  *v1.LifecycleHandler
	ports                    []v1.ContainerPort
	resources                *v1.ResourceRequirements
}

// readRecorded parses what containerAnnotations and containerLabels wrote.
// Malformed values are logged and read as unset: a container created by
// something else must not break the agent.
func readRecorded(ctx context.Context, labels, annotations map[string]string) recordedContainer {
	r := recordedContainer{
		podName:                  labels[LabelPodName],
		podNamespace:             labels[LabelPodNamespace],
		podUID:                   types.UID(labels[LabelPodUID]),
		name:                     labels[LabelContainerName],
		terminationMessagePath:   annotations[AnnotationTerminationMessagePath],
		terminationMessagePolicy: v1.TerminationMessagePolicy(annotations[AnnotationTerminationMessagePolicy]),
	}
	logger := klog.FromContext(ctx)
	bad := func(key string, err error) {
		logger.V(2).Info("Ignoring a malformed container annotation", "annotation", key, "value", annotations[key], "err", err,
			"pod", klog.KRef(r.podNamespace, r.podName), "container", r.name)
	}
	if v, ok := annotations[AnnotationContainerHash]; ok {
		h, err := strconv.ParseUint(v, 16, 64)
		if err != nil {
			bad(AnnotationContainerHash, err)
		}
		r.hash = h
	}
	if v, ok := annotations[AnnotationRestartCount]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			bad(AnnotationRestartCount, fmt.Errorf("not a restart count"))
		} else {
			r.restartCount = n
		}
	}
	for key, dst := range map[string]**int64{AnnotationDeletionGracePeriod: &r.deletionGracePeriod, AnnotationTerminationGracePeriod: &r.terminationGracePeriod} {
		if v, ok := annotations[key]; ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				bad(key, err)
				continue
			}
			*dst = &n
		}
	}
	if v, ok := annotations[AnnotationPreStopHandler]; ok {
		h := &v1.LifecycleHandler{}
		if err := json.Unmarshal([]byte(v), h); err != nil {
			bad(AnnotationPreStopHandler, err)
		} else {
			r.preStop = h
		}
	}
	if v, ok := annotations[AnnotationContainerPorts]; ok {
		if err := json.Unmarshal([]byte(v), &r.ports); err != nil {
			bad(AnnotationContainerPorts, err)
			r.ports = nil
		}
	}
	if v, ok := annotations[AnnotationContainerResources]; ok {
		res := &v1.ResourceRequirements{}
		if err := json.Unmarshal([]byte(v), res); err != nil {
			bad(AnnotationContainerResources, err)
		} else {
			r.resources = res
		}
	}
	return r
}
