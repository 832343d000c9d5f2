package manifest

import (
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/podsource"
)

// SetStaticDefaults gives pod, read from a static source, the fields the
// kubelet sets on such pods (its config applyDefaults), in place:
//
//   - metadata.uid, when empty: the kubelet's UID for the pod, an FNV-128a
//     hash (hex) of the pod as it is now as the kubelet prints it for
//     hashing (k8s.io/utils/dump.ForHash of its internal form), followed
//     by "host:<node>file:<path>" for the file source and "url:<url>" for
//     the HTTP source; any other source writes "host:<node>" and
//     "<source>:<location>". Call it after podsource.SetDefaults, as the
//     kubelet hashes the defaulted pod: a manifest then gets the UID a
//     kubelet gives it, so an agent that takes over a kubelet's node keeps
//     its static pods running (e2e/kubeletparity checks the UIDs against
//     the kubelet's own file source). Editing a manifest changes its pod's
//     UID, so the agent replaces the pod (REMOVE, then ADD), unless the
//     manifest sets metadata.uid;
//   - metadata.name <name>-<node name, lowercased>, so static pods of
//     different nodes do not clash;
//   - metadata.namespace "default" when empty;
//   - spec.nodeName the node;
//   - the kubernetes.io/config.hash annotation: the UID;
//   - for the file source, a toleration of every NoExecute taint, so node
//     problems do not evict static pods;
//   - status.phase Pending.
func SetStaticDefaults(pod *v1.Pod, nodeName, source, location string) error {
	if pod.UID == "" {
		pod.UID = staticPodUID(pod, nodeName, source, location)
	}
	pod.Name = GeneratePodName(pod.Name, nodeName)
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	pod.Spec.NodeName = nodeName
	if pod.Annotations == nil {
		pod.Annotations = make(map[string]string, 1)
	}
	pod.Annotations[podsource.ConfigHashAnnotationKey] = string(pod.UID)
	if source == podsource.FileSource {
		addOrUpdateToleration(&pod.Spec, v1.Toleration{Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute})
	}
	pod.Status.Phase = v1.PodPending
	return nil
}

// staticPodUID is the kubelet's UID for pod, read by source at location on
// the node nodeName (see SetStaticDefaults).
func staticPodUID(pod *v1.Pod, nodeName, source, location string) types.UID {
	h := fnv.New128a()
	h.Write(dumpForHash(pod))
	switch source {
	case podsource.FileSource:
		fmt.Fprintf(h, "host:%s", nodeName)
		fmt.Fprintf(h, "file:%s", location)
	case podsource.HTTPSource:
		fmt.Fprintf(h, "url:%s", location)
	default:
		fmt.Fprintf(h, "host:%s", nodeName)
		fmt.Fprintf(h, "%s:%s", source, location)
	}
	return types.UID(hex.EncodeToString(h.Sum(nil)))
}

// GeneratePodName is the name of the static pod named name on the node:
// <name>-<node name, lowercased>, as the kubelet names them.
func GeneratePodName(name, nodeName string) string {
	return name + "-" + strings.ToLower(nodeName)
}

// addOrUpdateToleration sets t among the spec's tolerations: a toleration
// with the same key, effect, operator and value is replaced by t, unless it
// equals t; otherwise t is appended (the kubelet's
// AddOrUpdateTolerationInPod).
func addOrUpdateToleration(spec *v1.PodSpec, t v1.Toleration) {
	var out []v1.Toleration
	updated := false
	for i := range spec.Tolerations {
		cur := spec.Tolerations[i]
		if t.MatchToleration(&cur) {
			if cur.TolerationSeconds == nil && t.TolerationSeconds == nil {
				return
			}
			out = append(out, t)
			updated = true
			continue
		}
		out = append(out, cur)
	}
	if !updated {
		out = append(out, t)
	}
	spec.Tolerations = out
}

// NodeReference is the object reference the kubelet records node events
// against before it knows the Node's UID (and always on a standalone node):
// apiVersion v1, kind Node and the node's name. Once the Node is known the
// kubelet adds its UID (so kubectl describe node finds the events by UID);
// give the sources a NodeRef func that does.
func NodeReference(nodeName string) *v1.ObjectReference {
	return &v1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: nodeName}
}
