package manifest

import (
	"fmt"
	"reflect"

	v1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodekit/nodekit/podsource"
)

// Validate checks a static pod, after its defaults, with a subset of the
// API server's pod validation (ValidatePodCreate, which the kubelet runs on
// static pods and which the library cannot import) plus the kubelet's
// static pod rules. It returns nil or an error listing every problem with
// its field path. The checks:
//
//   - metadata as the API server's ValidateObjectMeta: name a DNS-1123
//     subdomain, namespace a DNS-1123 label, label and annotation keys and
//     values, annotation size, owner references, finalizers;
//   - no kubernetes.io/config.mirror annotation (a static pod is not a
//     mirror pod);
//   - at least one container; container names (init, regular and
//     ephemeral) DNS-1123 labels and unique among them all; image set
//     (init and regular); imagePullPolicy, restartPolicy, dnsPolicy (None
//     needs dnsConfig), terminationMessagePolicy among the API's values;
//   - ports: containerPort 1-65535, hostPort 0-65535 (equal to
//     containerPort with hostNetwork), protocol TCP, UDP or SCTP, names
//     IANA service names unique within a container;
//   - env names set; volume mounts naming a volume, with a mount path;
//     requests not above limits;
//   - volumes: names DNS-1123 labels, unique, exactly one source each;
//   - terminationGracePeriodSeconds not negative, activeDeadlineSeconds
//     positive when set;
//   - the kubelet's rule that static pods reference no API objects: no
//     service account, image pull secrets, secrets, config maps, resource
//     claims, persistent volume claims, ephemeral, CSI, glusterfs or
//     azureFile volumes, projected sources other than downwardAPI.
//
// Not checked (the API server would): security context, affinity,
// topology spread, resource name and quantity rules, probe handler
// completeness, sysctls, host aliases, scheduling gates, overhead and
// feature-gated fields.
func Validate(pod *v1.Pod) error {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	errs = append(errs, apivalidation.ValidateObjectMeta(&pod.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, meta)...)
	if _, ok := pod.Annotations[podsource.ConfigMirrorAnnotationKey]; ok {
		errs = append(errs, field.Forbidden(meta.Child("annotations").Key(podsource.ConfigMirrorAnnotationKey),
			"a static pod must not be marked as a mirror pod"))
	}
	errs = append(errs, validateSpec(&pod.Spec, field.NewPath("spec"))...)
	errs = append(errs, apiReferences(pod)...)
	return errs.ToAggregate()
}

var (
	restartPolicies = sets.New(v1.RestartPolicyAlways, v1.RestartPolicyOnFailure, v1.RestartPolicyNever)
	dnsPolicies     = sets.New(v1.DNSClusterFirstWithHostNet, v1.DNSClusterFirst, v1.DNSDefault, v1.DNSNone)
	pullPolicies    = sets.New(v1.PullAlways, v1.PullIfNotPresent, v1.PullNever)
	protocols       = sets.New(v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP)
	messagePolicies = sets.New(v1.TerminationMessageReadFile, v1.TerminationMessageFallbackToLogsOnError)
)

func validateSpec(spec *v1.PodSpec, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if !restartPolicies.Has(spec.RestartPolicy) {
		errs = append(errs, field.NotSupported(path.Child("restartPolicy"), spec.RestartPolicy, sets.List(restartPolicies)))
	}
	if !dnsPolicies.Has(spec.DNSPolicy) {
		errs = append(errs, field.NotSupported(path.Child("dnsPolicy"), spec.DNSPolicy, sets.List(dnsPolicies)))
	}
	if spec.DNSPolicy == v1.DNSNone && spec.DNSConfig == nil {
		errs = append(errs, field.Required(path.Child("dnsConfig"), "must provide `dnsConfig` when `dnsPolicy` is None"))
	}
	if t := spec.TerminationGracePeriodSeconds; t != nil && *t < 0 {
		errs = append(errs, field.Invalid(path.Child("terminationGracePeriodSeconds"), *t, "must be greater than or equal to 0"))
	}
	if a := spec.ActiveDeadlineSeconds; a != nil && *a < 1 {
		errs = append(errs, field.Invalid(path.Child("activeDeadlineSeconds"), *a, "must be greater than or equal to 1"))
	}

	volumes := sets.New[string]()
	for i, vol := range spec.Volumes {
		p := path.Child("volumes").Index(i)
		for _, msg := range validation.IsDNS1123Label(vol.Name) {
			errs = append(errs, field.Invalid(p.Child("name"), vol.Name, msg))
		}
		if volumes.Has(vol.Name) {
			errs = append(errs, field.Duplicate(p.Child("name"), vol.Name))
		}
		volumes.Insert(vol.Name)
		if n := setPointers(reflect.ValueOf(vol.VolumeSource)); n != 1 {
			errs = append(errs, field.Invalid(p, vol.Name, fmt.Sprintf("must specify exactly 1 volume source, found %d", n)))
		}
	}

	if len(spec.Containers) == 0 {
		errs = append(errs, field.Required(path.Child("containers"), "a pod needs at least one container"))
	}
	names := sets.New[string]()
	check := func(c *v1.Container, p *field.Path, needsImage bool) {
		for _, msg := range validation.IsDNS1123Label(c.Name) {
			errs = append(errs, field.Invalid(p.Child("name"), c.Name, msg))
		}
		if names.Has(c.Name) {
			errs = append(errs, field.Duplicate(p.Child("name"), c.Name))
		}
		names.Insert(c.Name)
		errs = append(errs, validateContainer(c, p, spec.HostNetwork, volumes, needsImage)...)
	}
	for i := range spec.InitContainers {
		check(&spec.InitContainers[i], path.Child("initContainers").Index(i), true)
	}
	for i := range spec.Containers {
		check(&spec.Containers[i], path.Child("containers").Index(i), true)
	}
	for i := range spec.EphemeralContainers {
		check((*v1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon), path.Child("ephemeralContainers").Index(i), false)
	}
	return errs
}

func validateContainer(c *v1.Container, path *field.Path, hostNetwork bool, volumes sets.Set[string], needsImage bool) field.ErrorList {
	var errs field.ErrorList
	if needsImage && c.Image == "" {
		errs = append(errs, field.Required(path.Child("image"), ""))
	}
	if !pullPolicies.Has(c.ImagePullPolicy) {
		errs = append(errs, field.NotSupported(path.Child("imagePullPolicy"), c.ImagePullPolicy, sets.List(pullPolicies)))
	}
	if !messagePolicies.Has(c.TerminationMessagePolicy) {
		errs = append(errs, field.NotSupported(path.Child("terminationMessagePolicy"), c.TerminationMessagePolicy, sets.List(messagePolicies)))
	}
	portNames := sets.New[string]()
	for i, port := range c.Ports {
		p := path.Child("ports").Index(i)
		if port.Name != "" {
			for _, msg := range validation.IsValidPortName(port.Name) {
				errs = append(errs, field.Invalid(p.Child("name"), port.Name, msg))
			}
			if portNames.Has(port.Name) {
				errs = append(errs, field.Duplicate(p.Child("name"), port.Name))
			}
			portNames.Insert(port.Name)
		}
		for _, msg := range validation.IsValidPortNum(int(port.ContainerPort)) {
			errs = append(errs, field.Invalid(p.Child("containerPort"), port.ContainerPort, msg))
		}
		if port.HostPort != 0 {
			for _, msg := range validation.IsValidPortNum(int(port.HostPort)) {
				errs = append(errs, field.Invalid(p.Child("hostPort"), port.HostPort, msg))
			}
		}
		if hostNetwork && port.HostPort != port.ContainerPort {
			errs = append(errs, field.Invalid(p.Child("hostPort"), port.HostPort, "must match `containerPort` when `hostNetwork` is true"))
		}
		if !protocols.Has(port.Protocol) {
			errs = append(errs, field.NotSupported(p.Child("protocol"), port.Protocol, sets.List(protocols)))
		}
	}
	for i, env := range c.Env {
		if env.Name == "" {
			errs = append(errs, field.Required(path.Child("env").Index(i).Child("name"), ""))
		}
	}
	for i, m := range c.VolumeMounts {
		p := path.Child("volumeMounts").Index(i)
		if !volumes.Has(m.Name) {
			errs = append(errs, field.NotFound(p.Child("name"), m.Name))
		}
		if m.MountPath == "" {
			errs = append(errs, field.Required(p.Child("mountPath"), ""))
		}
	}
	for name, req := range c.Resources.Requests {
		if limit, ok := c.Resources.Limits[name]; ok && req.Cmp(limit) > 0 {
			errs = append(errs, field.Invalid(path.Child("resources", "requests").Key(string(name)), req.String(),
				fmt.Sprintf("must be less than or equal to %s limit of %s", name, limit.String())))
		}
	}
	return errs
}

// setPointers counts the non-nil pointer fields of a struct value.
func setPointers(v reflect.Value) int {
	n := 0
	for i := 0; i < v.NumField(); i++ {
		if f := v.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			n++
		}
	}
	return n
}

// apiReferences enforces the kubelet's rule that a static pod references no
// API object (its HasAPIObjectReference): the kubelet could not read them
// through the Node authorizer, which only admits objects of pods bound to
// the node through the API.
func apiReferences(pod *v1.Pod) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	forbid := func(p *field.Path, what string) {
		errs = append(errs, field.Forbidden(p, "static pods may not reference "+what))
	}
	if pod.Spec.ServiceAccountName != "" {
		forbid(spec.Child("serviceAccountName"), "serviceaccounts")
	}
	if len(pod.Spec.ImagePullSecrets) > 0 {
		forbid(spec.Child("imagePullSecrets"), "secrets")
	}
	if len(pod.Spec.ResourceClaims) > 0 {
		forbid(spec.Child("resourceClaims"), "resourceclaims")
	}
	containers := func(list []v1.Container, p *field.Path) {
		for i := range list {
			c := &list[i]
			for j, env := range c.Env {
				if f := env.ValueFrom; f != nil && f.SecretKeyRef != nil {
					forbid(p.Index(i).Child("env").Index(j), "secrets")
				} else if f != nil && f.ConfigMapKeyRef != nil {
					forbid(p.Index(i).Child("env").Index(j), "configmaps")
				}
			}
			for j, from := range c.EnvFrom {
				if from.SecretRef != nil {
					forbid(p.Index(i).Child("envFrom").Index(j), "secrets")
				} else if from.ConfigMapRef != nil {
					forbid(p.Index(i).Child("envFrom").Index(j), "configmaps")
				}
			}
		}
	}
	containers(pod.Spec.InitContainers, spec.Child("initContainers"))
	containers(pod.Spec.Containers, spec.Child("containers"))
	ephemeral := make([]v1.Container, len(pod.Spec.EphemeralContainers))
	for i := range pod.Spec.EphemeralContainers {
		ephemeral[i] = v1.Container(pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)
	}
	containers(ephemeral, spec.Child("ephemeralContainers"))

	for i, vol := range pod.Spec.Volumes {
		p := spec.Child("volumes").Index(i)
		switch s := vol.VolumeSource; {
		case s.Secret != nil, s.AzureFile != nil,
			s.CephFS != nil && s.CephFS.SecretRef != nil, s.Cinder != nil && s.Cinder.SecretRef != nil,
			s.FlexVolume != nil && s.FlexVolume.SecretRef != nil, s.RBD != nil && s.RBD.SecretRef != nil,
			s.ScaleIO != nil && s.ScaleIO.SecretRef != nil, s.ISCSI != nil && s.ISCSI.SecretRef != nil,
			s.StorageOS != nil && s.StorageOS.SecretRef != nil:
			forbid(p, "secrets")
		case s.ConfigMap != nil:
			forbid(p, "configmaps")
		case s.CSI != nil:
			forbid(p, "csidrivers (via CSI volumes)")
		case s.Glusterfs != nil:
			forbid(p, "endpoints (via glusterFS volumes)")
		case s.PersistentVolumeClaim != nil:
			forbid(p, "persistentvolumeclaims")
		case s.Ephemeral != nil:
			forbid(p, "persistentvolumeclaims (via ephemeral volumes)")
		case s.Projected != nil:
			for j, src := range s.Projected.Sources {
				if src.DownwardAPI == nil {
					forbid(p.Child("projected", "sources").Index(j), "API objects (only downwardAPI projections are allowed)")
				}
			}
		}
	}
	return errs
}
