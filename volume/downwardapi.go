package volume

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation"
)

// downwardAPIPlugin projects the pod's metadata and its containers'
// resources as files, on a tmpfs as the kubelet's.
type downwardAPIPlugin struct{ atomicVolume }

func (*downwardAPIPlugin) Name() string { return PluginDownwardAPI }

func (*downwardAPIPlugin) CanSupport(vol *v1.Volume) bool { return vol.DownwardAPI != nil }

func (p *downwardAPIPlugin) SetUp(ctx context.Context, vc *VolumeContext) (Mounted, error) {
	src := vc.Volume.DownwardAPI
	payload, err := downwardAPIPayload(src.Items, vc.Pod, vc.Host.NodeAllocatable(), fileMode(src.DefaultMode))
	if err != nil {
		return Mounted{}, err
	}
	return p.setUp(ctx, vc, payload)
}

func (p *downwardAPIPlugin) TearDown(ctx context.Context, vc *VolumeContext) error {
	return p.tearDown(ctx, vc)
}

// downwardAPIPayload renders the items, collecting every item's error as
// the kubelet does.
func downwardAPIPayload(items []v1.DownwardAPIVolumeFile, pod *v1.Pod, allocatable v1.ResourceList, defaultMode int32) (map[string]FileProjection, error) {
	var errs []error
	payload := make(map[string]FileProjection, len(items))
	for _, it := range items {
		fp := FileProjection{Mode: itemMode(it.Mode, defaultMode)}
		switch {
		case it.FieldRef != nil:
			s, err := podFieldValue(pod, it.FieldRef.FieldPath)
			if err != nil {
				errs = append(errs, err)
			} else {
				fp.Data = []byte(s)
			}
		case it.ResourceFieldRef != nil:
			s, err := containerResourceValue(pod, it.ResourceFieldRef, allocatable)
			if err != nil {
				errs = append(errs, err)
			} else {
				fp.Data = []byte(s)
			}
		}
		payload[filepath.Clean(it.Path)] = fp
	}
	return payload, utilerrors.NewAggregate(errs)
}

// podFieldValue resolves a downward API volume field path: the pod's name,
// namespace, uid, labels and annotations (all or one key), with the
// kubelet's error texts.
func podFieldValue(pod *v1.Pod, fieldPath string) (string, error) {
	if path, key, ok := splitSubscript(fieldPath); ok {
		switch path {
		case "metadata.annotations":
			if errs := validation.IsQualifiedName(strings.ToLower(key)); len(errs) != 0 {
				return "", fmt.Errorf("invalid key subscript in %s: %s", fieldPath, strings.Join(errs, ";"))
			}
			return pod.Annotations[key], nil
		case "metadata.labels":
			if errs := validation.IsQualifiedName(key); len(errs) != 0 {
				return "", fmt.Errorf("invalid key subscript in %s: %s", fieldPath, strings.Join(errs, ";"))
			}
			return pod.Labels[key], nil
		default:
			return "", fmt.Errorf("fieldPath %q does not support subscript", fieldPath)
		}
	}
	switch fieldPath {
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	}
	return "", fmt.Errorf("unsupported fieldPath: %v", fieldPath)
}

// splitSubscript splits "path['key']" into path and key.
func splitSubscript(fieldPath string) (string, string, bool) {
	s, ok := strings.CutSuffix(fieldPath, "']")
	if !ok {
		return fieldPath, "", false
	}
	path, key, ok := strings.Cut(s, "['")
	if !ok || path == "" {
		return fieldPath, "", false
	}
	return path, key, true
}

// formatMap renders labels or annotations as the downward API does:
// key="value" lines sorted by key, values quoted with Go escaping.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%v=%q", k, m[k])
	}
	return b.String()
}

// containerResourceValue resolves a resourceFieldRef of a downward API
// volume as the kubelet: a limit the container does not set (cpu, memory,
// ephemeral-storage) reads as the node's allocatable amount, the value is
// divided by the divisor (default 1) and rounded up.
func containerResourceValue(pod *v1.Pod, ref *v1.ResourceFieldSelector, allocatable v1.ResourceList) (string, error) {
	c := findContainer(pod, ref.ContainerName)
	if c == nil {
		return "", fmt.Errorf("container %s not found", ref.ContainerName)
	}
	limits := c.Resources.Limits.DeepCopy()
	if limits == nil {
		limits = v1.ResourceList{}
	}
	for _, rn := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage} {
		if q, ok := limits[rn]; !ok || q.IsZero() {
			if a, ok := allocatable[rn]; ok {
				limits[rn] = a.DeepCopy()
			}
		}
	}
	requests := c.Resources.Requests
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	kind, name, _ := strings.Cut(ref.Resource, ".")
	var list v1.ResourceList
	switch kind {
	case "limits":
		list = limits
	case "requests":
		list = requests
	default:
		return "", fmt.Errorf("unsupported container resource : %v", ref.Resource)
	}
	rn := v1.ResourceName(name)
	switch {
	case rn == v1.ResourceCPU:
		q := list[rn]
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	case rn == v1.ResourceMemory || rn == v1.ResourceEphemeralStorage || strings.HasPrefix(name, v1.ResourceHugePagesPrefix):
		q := list[rn]
		return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
	}
	return "", fmt.Errorf("unsupported container resource : %v", ref.Resource)
}

// findContainer returns the regular or init container named name.
func findContainer(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	return nil
}
