package runtime

import (
	"context"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekit/nodekit/podsource"
)

// envVar is one environment variable of a container.
type envVar struct{ name, value string }

// orderedEnv keeps variables in first-definition order with last-write-wins
// values, so a container's environment is deterministic.
type orderedEnv struct {
	names  []string
	values map[string]string
}

func (e *orderedEnv) set(name, value string) {
	if e.values == nil {
		e.values = map[string]string{}
	}
	if _, ok := e.values[name]; !ok {
		e.names = append(e.names, name)
	}
	e.values[name] = value
}

func (e *orderedEnv) list() []envVar {
	out := make([]envVar, len(e.names))
	for i, n := range e.names {
		out[i] = envVar{n, e.values[n]}
	}
	return out
}

// envContext is what a container's environment is computed from besides
// its spec.
type envContext struct {
	podIPs  []string
	hostIPs []net.IP
}

// makeEnv computes a container's environment as the kubelet does: envFrom
// sources (config maps and secrets, with their prefix), then env entries in
// order (values with $(VAR) references expanded, downward API fields and
// resources, config map and secret keys), then the service link variables
// of the pod's namespace and the "kubernetes" service that are not already
// set. Errors name what could not be resolved; they make the container
// wait with CreateContainerConfigError.
func (m *PodManager) makeEnv(ctx context.Context, pod *v1.Pod, c *v1.Container, ec envContext) ([]envVar, error) {
	serviceEnv, err := m.serviceEnv(pod)
	if err != nil {
		return nil, err
	}
	var (
		env        orderedEnv
		configMaps = map[string]*v1.ConfigMap{}
		secrets    = map[string]*v1.Secret{}
	)
	getConfigMap := func(name string) (*v1.ConfigMap, error) {
		if cm, ok := configMaps[name]; ok {
			return cm, nil
		}
		if m.opts.ConfigMaps == nil {
			return nil, fmt.Errorf("couldn't get configMap %s/%s: the agent has no config map source", pod.Namespace, name)
		}
		cm, err := m.opts.ConfigMaps(ctx, pod.Namespace, name)
		if err != nil {
			return nil, err
		}
		configMaps[name] = cm
		return cm, nil
	}
	getSecret := func(name string) (*v1.Secret, error) {
		if s, ok := secrets[name]; ok {
			return s, nil
		}
		if m.opts.Secrets == nil {
			return nil, fmt.Errorf("couldn't get secret %s/%s: the agent has no secret source", pod.Namespace, name)
		}
		s, err := m.opts.Secrets(ctx, pod.Namespace, name)
		if err != nil {
			return nil, err
		}
		secrets[name] = s
		return s, nil
	}

	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm, err := getConfigMap(from.ConfigMapRef.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && isOptional(from.ConfigMapRef.Optional) {
					continue
				}
				return nil, err
			}
			for _, k := range sortedKeys(cm.Data) {
				env.set(from.Prefix+k, cm.Data[k])
			}
		case from.SecretRef != nil:
			s, err := getSecret(from.SecretRef.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && isOptional(from.SecretRef.Optional) {
					continue
				}
				return nil, err
			}
			for _, k := range sortedKeys(s.Data) {
				env.set(from.Prefix+k, string(s.Data[k]))
			}
		}
	}

	for _, e := range c.Env {
		value := e.Value
		switch {
		case value != "":
			value = expand(value, func(name string) (string, bool) {
				if v, ok := env.values[name]; ok {
					return v, true
				}
				v, ok := serviceEnv.values[name]
				return v, ok
			})
		case e.ValueFrom == nil:
		case e.ValueFrom.FieldRef != nil:
			value, err = fieldRefValue(pod, e.ValueFrom.FieldRef.FieldPath, ec)
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
		case e.ValueFrom.ResourceFieldRef != nil:
			value, err = m.resourceFieldValue(pod, c, e.ValueFrom.ResourceFieldRef)
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm, err := getConfigMap(ref.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && isOptional(ref.Optional) {
					continue
				}
				return nil, err
			}
			v, ok := cm.Data[ref.Key]
			if !ok {
				if isOptional(ref.Optional) {
					continue
				}
				return nil, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, pod.Namespace, ref.Name)
			}
			value = v
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, err := getSecret(ref.Name)
			if err != nil {
				if apierrors.IsNotFound(err) && isOptional(ref.Optional) {
					continue
				}
				return nil, err
			}
			v, ok := s.Data[ref.Key]
			if !ok {
				if isOptional(ref.Optional) {
					continue
				}
				return nil, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, pod.Namespace, ref.Name)
			}
			value = string(v)
		default:
			return nil, fmt.Errorf("env %s: this agent does not support the value source", e.Name)
		}
		env.set(e.Name, value)
	}

	for _, name := range serviceEnv.names {
		if _, ok := env.values[name]; !ok {
			env.set(name, serviceEnv.values[name])
		}
	}
	return env.list(), nil
}

func isOptional(b *bool) bool { return b != nil && *b }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// serviceEnv returns the service link variables for pod: those of the
// "kubernetes" service in the default namespace always, and those of every
// service of the pod's namespace with a cluster IP when
// enableServiceLinks is not false. Without Options.Services it is empty; a
// static pod gets none while the services cannot be listed.
func (m *PodManager) serviceEnv(pod *v1.Pod) (orderedEnv, error) {
	var env orderedEnv
	if m.opts.Services == nil {
		return env, nil
	}
	services, err := m.opts.Services()
	switch {
	case err != nil && podsource.IsStaticPod(pod):
		// A static pod does not wait for the services, as the kubelet's:
		// it may have to run before any API server answers (it may be the
		// API server).
		services = nil
	case err != nil:
		return env, fmt.Errorf("list services for the environment of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	links := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
	chosen := map[string]*v1.Service{}
	for _, s := range services {
		if s.Spec.ClusterIP == "" || s.Spec.ClusterIP == v1.ClusterIPNone {
			continue
		}
		switch {
		case s.Namespace == "default" && s.Name == "kubernetes":
			if _, ok := chosen[s.Name]; !ok {
				chosen[s.Name] = s
			}
		case s.Namespace == pod.Namespace && links:
			chosen[s.Name] = s
		}
	}
	for _, name := range sortedKeys(chosen) {
		s := chosen[name]
		prefix := strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_"))
		ip := s.Spec.ClusterIP
		if len(s.Spec.Ports) == 0 {
			continue
		}
		env.set(prefix+"_SERVICE_HOST", ip)
		env.set(prefix+"_SERVICE_PORT", strconv.Itoa(int(s.Spec.Ports[0].Port)))
		for _, p := range s.Spec.Ports {
			if p.Name != "" {
				env.set(prefix+"_SERVICE_PORT_"+strings.ToUpper(strings.ReplaceAll(p.Name, "-", "_")), strconv.Itoa(int(p.Port)))
			}
		}
		for i, p := range s.Spec.Ports {
			proto := string(p.Protocol)
			if proto == "" {
				proto = string(v1.ProtocolTCP)
			}
			hostPort := net.JoinHostPort(ip, strconv.Itoa(int(p.Port)))
			url := strings.ToLower(proto) + "://" + hostPort
			if i == 0 {
				env.set(prefix+"_PORT", url)
			}
			portPrefix := fmt.Sprintf("%s_PORT_%d_%s", prefix, p.Port, strings.ToUpper(proto))
			env.set(portPrefix, url)
			env.set(portPrefix+"_PROTO", strings.ToLower(proto))
			env.set(portPrefix+"_PORT", strconv.Itoa(int(p.Port)))
			env.set(portPrefix+"_ADDR", ip)
		}
	}
	return env, nil
}

// fieldRefValue resolves a downward API field for the environment.
func fieldRefValue(pod *v1.Pod, fieldPath string, ec envContext) (string, error) {
	switch fieldPath {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP":
		if len(ec.podIPs) > 0 {
			return ec.podIPs[0], nil
		}
		return "", nil
	case "status.podIPs":
		return strings.Join(ec.podIPs, ","), nil
	case "status.hostIP", "status.hostIPs":
		if len(ec.hostIPs) == 0 {
			return "", fmt.Errorf("%s: the node's IPs are not known", fieldPath)
		}
		if fieldPath == "status.hostIP" {
			return ec.hostIPs[0].String(), nil
		}
		ips := make([]string, len(ec.hostIPs))
		for i, ip := range ec.hostIPs {
			ips[i] = ip.String()
		}
		return strings.Join(ips, ","), nil
	}
	for _, prefix := range []string{"metadata.labels", "metadata.annotations"} {
		if key, ok := subscript(fieldPath, prefix); ok {
			src := pod.Labels
			if prefix == "metadata.annotations" {
				src = pod.Annotations
			}
			return src[key], nil
		}
	}
	return "", fmt.Errorf("unsupported downward API field path %q", fieldPath)
}

// subscript parses "<prefix>['key']".
func subscript(path, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(path, prefix+"['")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "']")
}

// formatMap renders labels or annotations as the downward API does:
// key="value" lines sorted by key, values quoted with Go escaping.
func formatMap(m map[string]string) string {
	var b strings.Builder
	for i, k := range sortedKeys(m) {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(k + "=" + strconv.Quote(m[k]))
	}
	return b.String()
}

// resourceFieldValue resolves a downward API resource reference. A limit
// that is not set reads as the node's allocatable amount, as in the kubelet.
func (m *PodManager) resourceFieldValue(pod *v1.Pod, c *v1.Container, ref *v1.ResourceFieldSelector) (string, error) {
	target := c
	if ref.ContainerName != "" {
		target = findContainer(pod, ref.ContainerName)
		if target == nil {
			return "", fmt.Errorf("resourceFieldRef: no container %q in pod %s/%s", ref.ContainerName, pod.Namespace, pod.Name)
		}
	}
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("unsupported resourceFieldRef resource %q", ref.Resource)
	}
	rn := v1.ResourceName(name)
	var q resource.Quantity
	if kind == "limits" {
		q = target.Resources.Limits[rn]
		if q.IsZero() && m.opts.Allocatable != nil {
			q = m.opts.Allocatable()[rn]
		}
	} else {
		q = target.Resources.Requests[rn]
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if rn == v1.ResourceCPU {
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	}
	return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
}

// findContainer returns the init or regular container named name.
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

// expand replaces $(VAR) references in s by lookup's values, leaving unknown
// references as written; "$$" is an escaped "$". These are the Kubernetes
// expansion rules for env values, commands and args.
func expand(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok && name != "" {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// expandAll expands $(VAR) references in args with the container's
// environment.
func expandAll(args []string, env []envVar) []string {
	if len(args) == 0 {
		return args
	}
	values := make(map[string]string, len(env))
	for _, e := range env {
		values[e.name] = e.value
	}
	lookup := func(n string) (string, bool) { v, ok := values[n]; return v, ok }
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = expand(a, lookup)
	}
	return out
}
