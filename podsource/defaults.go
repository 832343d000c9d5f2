package podsource

import (
	"github.com/distribution/reference"
	v1 "k8s.io/api/core/v1"
)

// SetDefaults fills the fields of pod the API server defaults when a pod is
// created, as k8s.io/kubernetes pkg/apis/core/v1 (SetObjectDefaults_Pod) does
// with the feature gates at their v1.37 defaults: pods that do not come from
// the API server (static manifests, an embedder's source) then look to the
// agent exactly as API pods do. It modifies pod in place and is idempotent.
//
// What it sets, each only where the field is empty (unset):
//   - spec: dnsPolicy ClusterFirst, restartPolicy Always, securityContext {},
//     terminationGracePeriodSeconds 30 (a negative one becomes 1),
//     schedulerName default-scheduler, enableServiceLinks true,
//     serviceAccountName from the deprecated serviceAccount and back;
//   - every container (init, regular, ephemeral): imagePullPolicy Always
//     when the image's tag is latest or it has neither tag nor digest,
//     IfNotPresent otherwise; terminationMessagePath /dev/termination-log;
//     terminationMessagePolicy File; port protocol TCP; with hostNetwork,
//     hostPort = containerPort (init and regular containers); env fieldRef
//     apiVersion v1; fileKeyRef optional false; probes timeout 1 s, period
//     10 s, success 1, failure 3; httpGet path "/" and scheme HTTP (probes
//     and lifecycle hooks); grpc service ""; limits copied to missing
//     requests (init and regular containers); resource quantities rounded
//     up to milli-units;
//   - volumes: emptyDir when no source is set; hostPath type ""; secret,
//     configMap, downwardAPI and projected defaultMode 0644; projected
//     service account token expirationSeconds 3600; image volume
//     pullPolicy by tag as for containers; downwardAPI fieldRef apiVersion
//     v1; the legacy iSCSI, RBD, AzureDisk and ScaleIO fields; ephemeral
//     claim templates volumeMode Filesystem;
//   - status: podIP and podIPs made consistent.
func SetDefaults(pod *v1.Pod) {
	spec := &pod.Spec
	// SetDefaults_Pod.
	if spec.TerminationGracePeriodSeconds != nil && *spec.TerminationGracePeriodSeconds < 0 {
		one := int64(1)
		spec.TerminationGracePeriodSeconds = &one
	}
	for _, list := range [][]v1.Container{spec.Containers, spec.InitContainers} {
		for i := range list {
			copyLimitsToRequests(&list[i].Resources)
		}
	}
	if spec.EnableServiceLinks == nil {
		enable := v1.DefaultEnableServiceLinks
		spec.EnableServiceLinks = &enable
	}
	if spec.HostNetwork {
		for _, list := range [][]v1.Container{spec.Containers, spec.InitContainers} {
			for i := range list {
				for j := range list[i].Ports {
					if p := &list[i].Ports[j]; p.HostPort == 0 {
						p.HostPort = p.ContainerPort
					}
				}
			}
		}
	}

	// SetDefaults_PodSpec.
	if spec.ServiceAccountName == "" {
		spec.ServiceAccountName = spec.DeprecatedServiceAccount
	}
	spec.DeprecatedServiceAccount = spec.ServiceAccountName
	if spec.DNSPolicy == "" {
		spec.DNSPolicy = v1.DNSClusterFirst
	}
	if spec.RestartPolicy == "" {
		spec.RestartPolicy = v1.RestartPolicyAlways
	}
	if spec.SecurityContext == nil {
		spec.SecurityContext = &v1.PodSecurityContext{}
	}
	if spec.TerminationGracePeriodSeconds == nil {
		period := int64(v1.DefaultTerminationGracePeriodSeconds)
		spec.TerminationGracePeriodSeconds = &period
	}
	if spec.SchedulerName == "" {
		spec.SchedulerName = v1.DefaultSchedulerName
	}

	for i := range spec.Volumes {
		defaultVolume(&spec.Volumes[i])
	}
	for i := range spec.InitContainers {
		defaultContainer(&spec.InitContainers[i])
	}
	for i := range spec.Containers {
		defaultContainer(&spec.Containers[i])
	}
	for i := range spec.EphemeralContainers {
		defaultContainer((*v1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon))
	}
	roundUp(spec.Overhead)
	if spec.Resources != nil {
		roundUp(spec.Resources.Limits)
		roundUp(spec.Resources.Requests)
	}

	// SetDefaults_PodStatus and the status' resource lists.
	st := &pod.Status
	switch {
	case st.PodIP != "" && len(st.PodIPs) == 0:
		st.PodIPs = []v1.PodIP{{IP: st.PodIP}}
	case st.PodIP == "" && len(st.PodIPs) > 0:
		st.PodIP = st.PodIPs[0].IP
	case st.PodIP != "" && len(st.PodIPs) > 0 && st.PodIPs[0].IP != st.PodIP:
		st.PodIPs = []v1.PodIP{{IP: st.PodIP}}
	}
	for _, list := range [][]v1.ContainerStatus{st.InitContainerStatuses, st.ContainerStatuses, st.EphemeralContainerStatuses} {
		for i := range list {
			roundUp(list[i].AllocatedResources)
			if r := list[i].Resources; r != nil {
				roundUp(r.Limits)
				roundUp(r.Requests)
			}
		}
	}
	roundUp(st.AllocatedResources)
	if st.Resources != nil {
		roundUp(st.Resources.Limits)
		roundUp(st.Resources.Requests)
	}
}

// copyLimitsToRequests sets a missing request to its limit.
func copyLimitsToRequests(r *v1.ResourceRequirements) {
	if r.Limits == nil {
		return
	}
	if r.Requests == nil {
		r.Requests = make(v1.ResourceList, len(r.Limits))
	}
	for name, limit := range r.Limits {
		if _, ok := r.Requests[name]; !ok {
			r.Requests[name] = limit.DeepCopy()
		}
	}
}

// roundUp rounds every quantity up to milli-units (SetDefaults_ResourceList).
func roundUp(list v1.ResourceList) {
	for name, q := range list {
		q.RoundUp(-3)
		list[name] = q
	}
}

// pullPolicyFor is the pull policy of an image without one: Always for the
// latest tag, and for a reference with neither tag nor digest (which means
// latest); IfNotPresent otherwise, an unparsable reference included.
func pullPolicyFor(image string) v1.PullPolicy {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return v1.PullIfNotPresent
	}
	if tagged, ok := named.(reference.Tagged); ok {
		if tagged.Tag() == "latest" {
			return v1.PullAlways
		}
		return v1.PullIfNotPresent
	}
	if _, ok := named.(reference.Digested); ok {
		return v1.PullIfNotPresent
	}
	return v1.PullAlways
}

func defaultContainer(c *v1.Container) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = pullPolicyFor(c.Image)
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = v1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = v1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = v1.ProtocolTCP
		}
	}
	for i := range c.Env {
		from := c.Env[i].ValueFrom
		if from == nil {
			continue
		}
		defaultFieldRef(from.FieldRef)
		if from.FileKeyRef != nil && from.FileKeyRef.Optional == nil {
			optional := false
			from.FileKeyRef.Optional = &optional
		}
	}
	roundUp(c.Resources.Limits)
	roundUp(c.Resources.Requests)
	for _, p := range []*v1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		if p == nil {
			continue
		}
		if p.TimeoutSeconds == 0 {
			p.TimeoutSeconds = 1
		}
		if p.PeriodSeconds == 0 {
			p.PeriodSeconds = 10
		}
		if p.SuccessThreshold == 0 {
			p.SuccessThreshold = 1
		}
		if p.FailureThreshold == 0 {
			p.FailureThreshold = 3
		}
		defaultHTTPGet(p.HTTPGet)
		if p.GRPC != nil && p.GRPC.Service == nil {
			service := ""
			p.GRPC.Service = &service
		}
	}
	if l := c.Lifecycle; l != nil {
		for _, h := range []*v1.LifecycleHandler{l.PostStart, l.PreStop} {
			if h != nil {
				defaultHTTPGet(h.HTTPGet)
			}
		}
	}
}

func defaultHTTPGet(a *v1.HTTPGetAction) {
	if a == nil {
		return
	}
	if a.Path == "" {
		a.Path = "/"
	}
	if a.Scheme == "" {
		a.Scheme = v1.URISchemeHTTP
	}
}

func defaultFieldRef(f *v1.ObjectFieldSelector) {
	if f != nil && f.APIVersion == "" {
		f.APIVersion = "v1"
	}
}

func defaultMode(mode **int32, value int32) {
	if *mode == nil {
		*mode = &value
	}
}

func defaultVolume(vol *v1.Volume) {
	src := &vol.VolumeSource
	if (*src == v1.VolumeSource{}) {
		src.EmptyDir = &v1.EmptyDirVolumeSource{}
	}
	if src.Image != nil && src.Image.PullPolicy == "" {
		src.Image.PullPolicy = pullPolicyFor(src.Image.Reference)
	}
	if src.HostPath != nil && src.HostPath.Type == nil {
		unset := v1.HostPathUnset
		src.HostPath.Type = &unset
	}
	if src.Secret != nil {
		defaultMode(&src.Secret.DefaultMode, v1.SecretVolumeSourceDefaultMode)
	}
	if src.ISCSI != nil && src.ISCSI.ISCSIInterface == "" {
		src.ISCSI.ISCSIInterface = "default"
	}
	if rbd := src.RBD; rbd != nil {
		if rbd.RBDPool == "" {
			rbd.RBDPool = "rbd"
		}
		if rbd.RadosUser == "" {
			rbd.RadosUser = "admin"
		}
		if rbd.Keyring == "" {
			rbd.Keyring = "/etc/ceph/keyring"
		}
	}
	if d := src.DownwardAPI; d != nil {
		defaultMode(&d.DefaultMode, v1.DownwardAPIVolumeSourceDefaultMode)
		for i := range d.Items {
			defaultFieldRef(d.Items[i].FieldRef)
		}
	}
	if src.ConfigMap != nil {
		defaultMode(&src.ConfigMap.DefaultMode, v1.ConfigMapVolumeSourceDefaultMode)
	}
	if a := src.AzureDisk; a != nil {
		if a.CachingMode == nil {
			mode := v1.AzureDataDiskCachingReadWrite
			a.CachingMode = &mode
		}
		if a.FSType == nil {
			fs := "ext4"
			a.FSType = &fs
		}
		if a.ReadOnly == nil {
			ro := false
			a.ReadOnly = &ro
		}
		if a.Kind == nil {
			kind := v1.AzureSharedBlobDisk
			a.Kind = &kind
		}
	}
	if p := src.Projected; p != nil {
		defaultMode(&p.DefaultMode, v1.ProjectedVolumeSourceDefaultMode)
		for i := range p.Sources {
			s := &p.Sources[i]
			if s.DownwardAPI != nil {
				for j := range s.DownwardAPI.Items {
					defaultFieldRef(s.DownwardAPI.Items[j].FieldRef)
				}
			}
			if s.ServiceAccountToken != nil && s.ServiceAccountToken.ExpirationSeconds == nil {
				hour := int64(3600)
				s.ServiceAccountToken.ExpirationSeconds = &hour
			}
		}
	}
	if s := src.ScaleIO; s != nil {
		if s.StorageMode == "" {
			s.StorageMode = "ThinProvisioned"
		}
		if s.FSType == "" {
			s.FSType = "xfs"
		}
	}
	if e := src.Ephemeral; e != nil && e.VolumeClaimTemplate != nil {
		spec := &e.VolumeClaimTemplate.Spec
		if spec.VolumeMode == nil {
			mode := v1.PersistentVolumeFilesystem
			spec.VolumeMode = &mode
		}
		roundUp(spec.Resources.Limits)
		roundUp(spec.Resources.Requests)
	}
}
