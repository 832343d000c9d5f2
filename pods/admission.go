package pods

import (
	"fmt"
	goruntime "runtime"
	"slices"
	"strings"

	"go.uber.org/fx"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	resourcehelper "k8s.io/component-helpers/resource"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/internal/fxgroup"
	"github.com/nodekit/nodekit/internal/ordered"
	"github.com/nodekit/nodekit/podsource"
)

// AdmitHandlerGroup is the fx value group of OrderedAdmitHandler the
// Controller consults, by Order, before a pod starts. Add to it with
// AsAdmitHandler.
const AdmitHandlerGroup = "pod_admit_handlers"

// OrderedAdmitHandler is one entry of the AdmitHandlerGroup: a handler with
// a Name (for logs, and to replace a default: a handler with the Name of a
// default replaces it, one with a nil Handler removes it) and an Order
// (ascending; equal orders by Name).
type OrderedAdmitHandler struct {
	Name    string
	Order   int
	Handler AdmitHandler

	isDefault bool
}

// Names and orders of the default admit handlers, in the kubelet's order:
// the eviction manager's pressure check first, then the general
// predicates. They are 100 apart so an embedder can slot one between.
const (
	AdmitEviction          = "Eviction"
	AdmitGeneralPredicates = "GeneralPredicates"

	OrderEviction          = 100
	OrderGeneralPredicates = 200
)

// AdmitAttributes is what an admit handler decides on.
type AdmitAttributes struct {
	// Pod is the pod to admit. Handlers must not modify it.
	Pod *v1.Pod
	// OtherPods are the pods already admitted on the node and not yet
	// terminated.
	OtherPods []*v1.Pod
	// Node is the node as last seen; nil before it is known.
	Node *v1.Node
}

// AdmitResult is an admit handler's decision. Reason is a CamelCase word
// (it becomes the pod's status.reason, e.g. "OutOfcpu") and Message says
// what was wrong.
type AdmitResult struct {
	Admit   bool
	Reason  string
	Message string
}

// AdmitHandler decides whether a pod may start on the node, as the
// kubelet's lifecycle.PodAdmitHandler. A rejected pod is failed with the
// result's reason and message and never started. Admit is called from one
// goroutine at a time and must not block on the network.
type AdmitHandler interface {
	Admit(attrs AdmitAttributes) AdmitResult
}

// AdmitFunc adapts a func to AdmitHandler.
type AdmitFunc func(attrs AdmitAttributes) AdmitResult

// Admit calls f.
func (f AdmitFunc) Admit(attrs AdmitAttributes) AdmitResult { return f(attrs) }

// Admission failure reasons, as the kubelet writes them.
const (
	ReasonOutOfCPU              = "OutOfcpu"
	ReasonOutOfMemory           = "OutOfmemory"
	ReasonOutOfEphemeralStorage = "OutOfephemeral-storage"
	ReasonOutOfPods             = "OutOfpods"
	ReasonNodeAffinity          = "NodeAffinity"
	ReasonNodeName              = "NodeName"
	ReasonNodePorts             = "NodePorts"
	ReasonTaintToleration       = "TaintToleration"
	ReasonInvalidNodeInfo       = "InvalidNodeInfo"

	ReasonPodOSSelectorNodeLabelDoesNotMatch   = "PodOSSelectorNodeLabelDoesNotMatch"
	ReasonPodOSNotSupported                    = "PodOSNotSupported"
	ReasonSupplementalGroupsPolicyNotSupported = "SupplementalGroupsPolicyNotSupported"
)

// GeneralPredicates is the kubelet's predicate admit handler: the pod's
// OS (label and spec.os) is the node's and its supplementalGroupsPolicy
// Strict is supported by the runtime; the pod's
// requests fit the node's allocatable beside the other pods (cpu, memory,
// ephemeral-storage, extended resources, pod count), its node selector and
// required node affinity match, its nodeName is this node, its host ports
// are free, and it tolerates the node's NoExecute taints (static pods, those
// with the kubernetes.io/config.source annotation other than "api", are not
// checked against taints). As the kubelet, only the first failure is
// reported.
func GeneralPredicates(logger klog.Logger) AdmitHandler {
	return AdmitFunc(func(a AdmitAttributes) AdmitResult {
		if a.Node == nil {
			return AdmitResult{Reason: ReasonInvalidNodeInfo, Message: "Kubelet cannot get node info."}
		}
		if r, ok := osAndGroupsPolicy(a.Pod, a.Node); !ok {
			return r
		}
		if r, ok := fitsResources(a.Pod, a.OtherPods, a.Node); !ok {
			return r
		}
		if ok, _ := nodeaffinity.GetRequiredNodeAffinity(a.Pod).Match(a.Node); !ok {
			return predicateFailure(ReasonNodeAffinity, "node(s) didn't match Pod's node affinity/selector")
		}
		if a.Pod.Spec.NodeName != "" && a.Pod.Spec.NodeName != a.Node.Name {
			return predicateFailure(ReasonNodeName, "node(s) didn't match the requested node name")
		}
		if !hostPortsFree(a.Pod, a.OtherPods) {
			return predicateFailure(ReasonNodePorts, "node(s) didn't have free ports for the requested pod ports")
		}
		if !podsource.IsStaticPod(a.Pod) {
			_, untolerated := corev1helpers.FindMatchingUntoleratedTaint(logger, a.Node.Spec.Taints, a.Pod.Spec.Tolerations,
				func(t *v1.Taint) bool { return t.Effect == v1.TaintEffectNoExecute }, false)
			if untolerated {
				return predicateFailure(ReasonTaintToleration, "node(s) had taints that the pod didn't tolerate")
			}
		}
		return AdmitResult{Admit: true}
	})
}

// osAndGroupsPolicy is the kubelet's first predicate checks: a pod whose
// kubernetes.io/os label or spec.os names another OS than the node's, or
// that asks for supplementalGroupsPolicy Strict on a node whose runtime
// does not support it (status.features.supplementalGroupsPolicy), is
// refused.
func osAndGroupsPolicy(pod *v1.Pod, node *v1.Node) (AdmitResult, bool) {
	nodeOS := node.Labels[v1.LabelOSStable]
	if nodeOS == "" || nodeOS != goruntime.GOOS {
		nodeOS = goruntime.GOOS
	}
	if podOS, ok := pod.Labels[v1.LabelOSStable]; ok && podOS != nodeOS {
		return AdmitResult{Reason: ReasonPodOSSelectorNodeLabelDoesNotMatch,
			Message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"}, false
	}
	if pod.Spec.OS != nil && string(pod.Spec.OS.Name) != goruntime.GOOS {
		return AdmitResult{Reason: ReasonPodOSNotSupported, Message: "Failed to admit pod as the OS field doesn't match node OS"}, false
	}
	if sc := pod.Spec.SecurityContext; sc != nil && sc.SupplementalGroupsPolicy != nil &&
		*sc.SupplementalGroupsPolicy == v1.SupplementalGroupsPolicyStrict &&
		(node.Status.Features == nil || node.Status.Features.SupplementalGroupsPolicy == nil || !*node.Status.Features.SupplementalGroupsPolicy) {
		return AdmitResult{Reason: ReasonSupplementalGroupsPolicyNotSupported,
			Message: fmt.Sprintf("SupplementalGroupsPolicy=%s is not supported in this node", v1.SupplementalGroupsPolicyStrict)}, false
	}
	return AdmitResult{}, true
}

func predicateFailure(name, desc string) AdmitResult {
	return AdmitResult{Reason: name, Message: fmt.Sprintf("Predicate %s failed: %s", name, desc)}
}

// fitsResources checks the pod count and every requested resource against
// allocatable, reporting the first shortage as the kubelet does.
func fitsResources(pod *v1.Pod, others []*v1.Pod, node *v1.Node) (AdmitResult, bool) {
	alloc := node.Status.Allocatable
	if maxPods := alloc.Pods().Value(); int64(len(others))+1 > maxPods {
		return insufficient(v1.ResourcePods, 1, int64(len(others)), maxPods), false
	}
	requests := resourcehelper.PodRequests(withoutMissingExtendedResources(pod, alloc), resourcehelper.PodResourcesOptions{})
	if len(requests) == 0 {
		return AdmitResult{}, true
	}
	used := v1.ResourceList{}
	for _, p := range others {
		for name, q := range resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}) {
			sum := used[name]
			sum.Add(q)
			used[name] = sum
		}
	}
	// Check in the kubelet's order: cpu, memory, ephemeral-storage, then the
	// rest by name.
	var extra []v1.ResourceName
	for name := range requests {
		if name != v1.ResourceCPU && name != v1.ResourceMemory && name != v1.ResourceEphemeralStorage {
			extra = append(extra, name)
		}
	}
	slices.Sort(extra)
	names := append([]v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage}, extra...)
	for _, name := range names {
		req, ok := requests[name]
		if !ok || req.IsZero() {
			continue
		}
		capacity, hasCap := alloc[name]
		if !hasCap && isNativeResource(name) {
			continue // the node reports no such capacity; nothing to check
		}
		r, u, c := resourceValue(name, req), resourceValue(name, used[name]), resourceValue(name, capacity)
		if r+u > c {
			return insufficient(name, r, u, c), false
		}
	}
	return AdmitResult{}, true
}

// withoutMissingExtendedResources returns pod, or a copy of it whose
// containers no longer request extended resources alloc does not list nor
// the scheduler mapped to a DRA claim, as the kubelet's
// removeMissingExtendedResources: such requests are the business of
// another allocator (or of none), not of the node's allocatable, so a pod
// bound to the node with them is admitted rather than failed OutOf<name>.
// Only requests are filtered; the fit check reads nothing else.
func withoutMissingExtendedResources(pod *v1.Pod, alloc v1.ResourceList) *v1.Pod {
	drop := func(c *v1.Container, name v1.ResourceName) bool {
		if backedByDRA(pod, c.Name, name) {
			return true
		}
		_, listed := alloc[name]
		return isExtendedResource(name) && !listed
	}
	var out *v1.Pod
	filter := func(containers func(*v1.Pod) []v1.Container) {
		for i := range containers(pod) {
			c := &containers(pod)[i]
			for name := range c.Resources.Requests {
				if !drop(c, name) {
					continue
				}
				if out == nil {
					out = pod.DeepCopy()
				}
				delete(containers(out)[i].Resources.Requests, name)
			}
		}
	}
	filter(func(p *v1.Pod) []v1.Container { return p.Spec.InitContainers })
	filter(func(p *v1.Pod) []v1.Container { return p.Spec.Containers })
	if out == nil {
		return pod
	}
	return out
}

// isExtendedResource reports whether name is an extended resource: one
// outside the kubernetes.io domain with a domain of its own and no
// "requests." prefix (v1helper.IsExtendedResourceName).
func isExtendedResource(name v1.ResourceName) bool {
	if isNativeResource(name) || strings.HasPrefix(string(name), v1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(v1.DefaultResourceRequestsPrefix+string(name))) == 0
}

// backedByDRA reports whether the scheduler mapped container's request for
// name to a DRA resource claim (pod.status.extendedResourceClaimStatus).
func backedByDRA(pod *v1.Pod, container string, name v1.ResourceName) bool {
	st := pod.Status.ExtendedResourceClaimStatus
	if st == nil {
		return false
	}
	for _, m := range st.RequestMappings {
		if v1.ResourceName(m.ResourceName) == name && m.ContainerName == container {
			return true
		}
	}
	return false
}

// resourceValue is q in the unit the kubelet reports: millicores for cpu,
// whole units otherwise.
func resourceValue(name v1.ResourceName, q resource.Quantity) int64 {
	if name == v1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}

func isNativeResource(name v1.ResourceName) bool {
	return !strings.Contains(string(name), "/") || strings.HasPrefix(string(name), "kubernetes.io/")
}

func insufficient(name v1.ResourceName, requested, used, capacity int64) AdmitResult {
	reason := "OutOf" + string(name)
	return AdmitResult{
		Reason: reason,
		Message: fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d",
			name, requested, used, capacity),
	}
}

type hostPort struct {
	ip       string
	protocol v1.Protocol
	port     int32
}

func podHostPorts(pod *v1.Pod) []hostPort {
	var out []hostPort
	add := func(cs []v1.Container) {
		for _, c := range cs {
			for _, p := range c.Ports {
				if p.HostPort <= 0 {
					continue
				}
				proto := p.Protocol
				if proto == "" {
					proto = v1.ProtocolTCP
				}
				ip := p.HostIP
				if ip == "" {
					ip = "0.0.0.0"
				}
				out = append(out, hostPort{ip: ip, protocol: proto, port: p.HostPort})
			}
		}
	}
	add(pod.Spec.InitContainers)
	add(pod.Spec.Containers)
	return out
}

// hostPortsFree reports whether none of pod's host ports conflicts with one
// of others': same protocol and port, and the same IP or either wildcard.
func hostPortsFree(pod *v1.Pod, others []*v1.Pod) bool {
	want := podHostPorts(pod)
	if len(want) == 0 {
		return true
	}
	for _, o := range others {
		for _, used := range podHostPorts(o) {
			for _, w := range want {
				if w.port == used.port && w.protocol == used.protocol &&
					(w.ip == used.ip || w.ip == "0.0.0.0" || used.ip == "0.0.0.0") {
					return false
				}
			}
		}
	}
	return true
}

// defaultAdmitNames are the names of default admit handlers in some
// configuration: removing one that is absent is a no-op.
var defaultAdmitNames = map[string]bool{AdmitEviction: true, AdmitGeneralPredicates: true, AdmitSysctls: true,
	AdmitAppArmor: true, AdmitPodFeatures: true, AdmitDeclaredFeatures: true}

// defaultAdmitHandler marks h as one of the defaults, which an embedder's
// handler of the same Name replaces.
func defaultAdmitHandler(name string, order int, h AdmitHandler) OrderedAdmitHandler {
	return OrderedAdmitHandler{Name: name, Order: order, Handler: h, isDefault: true}
}

// AsDefaultAdmitHandler is AsAdmitHandler for a module that provides one of
// the default handlers named by the Admit* constants outside this package
// (the agent's eviction wiring provides AdmitEviction): a handler added
// with AsAdmitHandler under the same name replaces it, or removes it.
func AsDefaultAdmitHandler(name string, order int, handler any) fx.Option {
	return fxgroup.Provide(AdmitHandlerGroup, handler, func(h AdmitHandler) OrderedAdmitHandler {
		return defaultAdmitHandler(name, order, h)
	})
}

// ResolveAdmitHandlers applies replacement and removal by Name and returns
// the handlers in the order they run, for Options.Admit.
func ResolveAdmitHandlers(in []OrderedAdmitHandler) ([]AdmitHandler, error) {
	entries := make([]ordered.Entry[AdmitHandler], len(in))
	for i, h := range in {
		entries[i] = ordered.Entry[AdmitHandler]{Name: h.Name, Order: h.Order, Value: h.Handler, Default: h.isDefault}
	}
	resolved, err := ordered.Resolve("pod admit handler", entries,
		isNilAdmitHandler, func(name string) bool { return defaultAdmitNames[name] })
	if err != nil {
		return nil, err
	}
	out := make([]AdmitHandler, len(resolved))
	for i, e := range resolved {
		out[i] = e.Value
	}
	return out, nil
}

// isNilAdmitHandler reports whether h is nil, or a nil AdmitFunc (which
// would panic when called): both remove the default of their name.
func isNilAdmitHandler(h AdmitHandler) bool {
	f, ok := h.(AdmitFunc)
	return h == nil || (ok && f == nil)
}

// AsAdmitHandler returns an fx option that adds an admit handler to the
// AdmitHandlerGroup under name and order: handler is an AdmitHandler (an
// AdmitFunc, say), or an fx constructor returning one (and optionally an
// error). A name of a default handler replaces it; see OrderEviction and
// OrderGeneralPredicates to place it. A nil handler (nil, or a nil
// AdmitFunc) removes the default of that name; with a name no default has,
// the agent fails to start. A handler that panics rejects the pod it was
// asked about (reason UnexpectedAdmissionError, a warning event and an
// error line naming the handler); the loop goes on.
func AsAdmitHandler(name string, order int, handler any) fx.Option {
	return fxgroup.Provide(AdmitHandlerGroup, handler, func(h AdmitHandler) OrderedAdmitHandler {
		return OrderedAdmitHandler{Name: name, Order: order, Handler: h}
	})
}
