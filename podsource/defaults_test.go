package podsource_test

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodekit/nodekit/podsource"
)

// The expected values are those of k8s.io/kubernetes v1.37.2
// pkg/apis/core/v1/defaults.go and zz_generated.defaults.go with the
// default feature gates.
func TestSetDefaultsPodSpec(t *testing.T) {
	p := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "nginx:1.27"}}}}
	podsource.SetDefaults(p)
	s := p.Spec
	switch {
	case s.DNSPolicy != v1.DNSClusterFirst:
		t.Errorf("dnsPolicy %q", s.DNSPolicy)
	case s.RestartPolicy != v1.RestartPolicyAlways:
		t.Errorf("restartPolicy %q", s.RestartPolicy)
	case s.TerminationGracePeriodSeconds == nil || *s.TerminationGracePeriodSeconds != 30:
		t.Errorf("terminationGracePeriodSeconds %v", s.TerminationGracePeriodSeconds)
	case s.SchedulerName != "default-scheduler":
		t.Errorf("schedulerName %q", s.SchedulerName)
	case s.SecurityContext == nil || !equality.Semantic.DeepEqual(*s.SecurityContext, v1.PodSecurityContext{}):
		t.Errorf("securityContext %v", s.SecurityContext)
	case s.EnableServiceLinks == nil || !*s.EnableServiceLinks:
		t.Errorf("enableServiceLinks %v", s.EnableServiceLinks)
	case s.Containers[0].TerminationMessagePath != "/dev/termination-log":
		t.Errorf("terminationMessagePath %q", s.Containers[0].TerminationMessagePath)
	case s.Containers[0].TerminationMessagePolicy != v1.TerminationMessageReadFile:
		t.Errorf("terminationMessagePolicy %q", s.Containers[0].TerminationMessagePolicy)
	case s.HostNetwork || s.ServiceAccountName != "" || len(s.Volumes) != 0:
		t.Errorf("unexpected fields set: %+v", s)
	}

	negative := int64(-5)
	p = &v1.Pod{Spec: v1.PodSpec{TerminationGracePeriodSeconds: &negative, DeprecatedServiceAccount: "legacy"}}
	podsource.SetDefaults(p)
	if *p.Spec.TerminationGracePeriodSeconds != 1 {
		t.Errorf("negative grace period became %d, want 1", *p.Spec.TerminationGracePeriodSeconds)
	}
	if p.Spec.ServiceAccountName != "legacy" || p.Spec.DeprecatedServiceAccount != "legacy" {
		t.Errorf("service account %q/%q", p.Spec.ServiceAccountName, p.Spec.DeprecatedServiceAccount)
	}
}

func TestSetDefaultsImagePullPolicy(t *testing.T) {
	for image, want := range map[string]v1.PullPolicy{
		"nginx":                    v1.PullAlways,
		"nginx:latest":             v1.PullAlways,
		"registry:5000/nginx":      v1.PullAlways,
		"registry:5000/nginx:1.27": v1.PullIfNotPresent,
		"nginx:1.27":               v1.PullIfNotPresent,
		"nginx@sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855":        v1.PullIfNotPresent,
		"nginx:latest@sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855": v1.PullAlways,
		"Not/Valid":   v1.PullIfNotPresent,
		"":            v1.PullIfNotPresent,
		"nginx:1.27 ": v1.PullIfNotPresent,
	} {
		p := &v1.Pod{Spec: v1.PodSpec{
			Containers:          []v1.Container{{Name: "c", Image: image}},
			InitContainers:      []v1.Container{{Name: "i", Image: image}},
			EphemeralContainers: []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{Name: "e", Image: image}}},
			Volumes:             []v1.Volume{{Name: "v", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: image}}}},
		}}
		podsource.SetDefaults(p)
		got := []v1.PullPolicy{p.Spec.Containers[0].ImagePullPolicy, p.Spec.InitContainers[0].ImagePullPolicy,
			p.Spec.EphemeralContainers[0].ImagePullPolicy, p.Spec.Volumes[0].Image.PullPolicy}
		for _, g := range got {
			if g != want {
				t.Errorf("%q: pull policies %v, want %v", image, got, want)
				break
			}
		}
	}
	p := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "nginx", ImagePullPolicy: v1.PullNever}}}}
	podsource.SetDefaults(p)
	if p.Spec.Containers[0].ImagePullPolicy != v1.PullNever {
		t.Errorf("an explicit policy was replaced: %v", p.Spec.Containers[0].ImagePullPolicy)
	}
}

func TestSetDefaultsContainers(t *testing.T) {
	probe := func() *v1.Probe {
		return &v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{}}}
	}
	p := &v1.Pod{Spec: v1.PodSpec{
		HostNetwork: true,
		Containers: []v1.Container{{
			Name: "c", Image: "i",
			Ports: []v1.ContainerPort{{ContainerPort: 80}, {ContainerPort: 53, HostPort: 5353, Protocol: v1.ProtocolUDP}},
			Env: []v1.EnvVar{{Name: "POD", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				{Name: "F", ValueFrom: &v1.EnvVarSource{FileKeyRef: &v1.FileKeySelector{Key: "k"}}}},
			Resources: v1.ResourceRequirements{
				Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("1.0001"), v1.ResourceMemory: resource.MustParse("1Gi")},
				Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse("512Mi")},
			},
			LivenessProbe:  probe(),
			ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: 9}}, PeriodSeconds: 3},
			StartupProbe:   probe(),
			Lifecycle:      &v1.Lifecycle{PreStop: &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{}}},
		}},
		InitContainers: []v1.Container{{Name: "i", Image: "i", Ports: []v1.ContainerPort{{ContainerPort: 8080}},
			Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")}}}},
		EphemeralContainers: []v1.EphemeralContainer{{EphemeralContainerCommon: v1.EphemeralContainerCommon{
			Name: "e", Image: "i", Ports: []v1.ContainerPort{{ContainerPort: 9090}}}}},
	}}
	podsource.SetDefaults(p)
	c := p.Spec.Containers[0]
	if c.Ports[0].Protocol != v1.ProtocolTCP || c.Ports[0].HostPort != 80 || c.Ports[1].HostPort != 5353 || c.Ports[1].Protocol != v1.ProtocolUDP {
		t.Errorf("ports %+v", c.Ports)
	}
	if hp := p.Spec.InitContainers[0].Ports[0].HostPort; hp != 8080 {
		t.Errorf("init container hostPort %d", hp)
	}
	if e := p.Spec.EphemeralContainers[0].Ports[0]; e.HostPort != 0 || e.Protocol != v1.ProtocolTCP {
		t.Errorf("ephemeral container port %+v (hostPort is not defaulted for them)", e)
	}
	if c.Env[0].ValueFrom.FieldRef.APIVersion != "v1" || c.Env[1].ValueFrom.FileKeyRef.Optional == nil || *c.Env[1].ValueFrom.FileKeyRef.Optional {
		t.Errorf("env %+v %+v", c.Env[0].ValueFrom.FieldRef, c.Env[1].ValueFrom.FileKeyRef)
	}
	if cpu := c.Resources.Requests[v1.ResourceCPU]; cpu.String() != "1001m" {
		t.Errorf("cpu request %s, want the limit rounded up to 1001m", cpu.String())
	}
	if cpu := c.Resources.Limits[v1.ResourceCPU]; cpu.String() != "1001m" {
		t.Errorf("cpu limit %s, want 1001m", cpu.String())
	}
	if mem := c.Resources.Requests[v1.ResourceMemory]; mem.String() != "512Mi" {
		t.Errorf("memory request %s: an existing request was replaced", mem.String())
	}
	if cpu := p.Spec.InitContainers[0].Resources.Requests[v1.ResourceCPU]; cpu.String() != "250m" {
		t.Errorf("init cpu request %s", cpu.String())
	}
	for name, pr := range map[string]*v1.Probe{"liveness": c.LivenessProbe, "startup": c.StartupProbe} {
		if pr.TimeoutSeconds != 1 || pr.PeriodSeconds != 10 || pr.SuccessThreshold != 1 || pr.FailureThreshold != 3 ||
			pr.HTTPGet.Path != "/" || pr.HTTPGet.Scheme != v1.URISchemeHTTP || pr.HTTPGet.Protocol != nil {
			t.Errorf("%s probe %+v %+v", name, pr, pr.HTTPGet)
		}
	}
	if r := c.ReadinessProbe; r.PeriodSeconds != 3 || r.GRPC.Service == nil || *r.GRPC.Service != "" {
		t.Errorf("readiness probe %+v", r)
	}
	if h := c.Lifecycle.PreStop.HTTPGet; h.Path != "/" || h.Scheme != v1.URISchemeHTTP {
		t.Errorf("preStop %+v", h)
	}
}

func TestSetDefaultsVolumes(t *testing.T) {
	p := &v1.Pod{Spec: v1.PodSpec{Volumes: []v1.Volume{
		{Name: "none"},
		{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/x"}}},
		{Name: "secret", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{}}},
		{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{}}},
		{Name: "down", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{
			Items: []v1.DownwardAPIVolumeFile{{Path: "n", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}},
		{Name: "proj", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "t"}},
			{DownwardAPI: &v1.DownwardAPIProjection{Items: []v1.DownwardAPIVolumeFile{{Path: "n", FieldRef: &v1.ObjectFieldSelector{}}}}},
		}}}},
		{Name: "eph", VolumeSource: v1.VolumeSource{Ephemeral: &v1.EphemeralVolumeSource{VolumeClaimTemplate: &v1.PersistentVolumeClaimTemplate{}}}},
	}}}
	podsource.SetDefaults(p)
	v := p.Spec.Volumes
	if v[0].EmptyDir == nil {
		t.Error("a volume without source did not become an emptyDir")
	}
	if v[1].HostPath.Type == nil || *v[1].HostPath.Type != v1.HostPathUnset || v[1].EmptyDir != nil {
		t.Errorf("hostPath %+v", v[1].VolumeSource)
	}
	for i, mode := range []*int32{v[2].Secret.DefaultMode, v[3].ConfigMap.DefaultMode, v[4].DownwardAPI.DefaultMode, v[5].Projected.DefaultMode} {
		if mode == nil || *mode != 0o644 {
			t.Errorf("volume %s defaultMode %v, want 0644", v[i+2].Name, mode)
		}
	}
	if v[4].DownwardAPI.Items[0].FieldRef.APIVersion != "v1" || v[5].Projected.Sources[1].DownwardAPI.Items[0].FieldRef.APIVersion != "v1" {
		t.Error("downward API fieldRef apiVersion not v1")
	}
	if exp := v[5].Projected.Sources[0].ServiceAccountToken.ExpirationSeconds; exp == nil || *exp != 3600 {
		t.Errorf("token expiration %v", exp)
	}
	if m := v[6].Ephemeral.VolumeClaimTemplate.Spec.VolumeMode; m == nil || *m != v1.PersistentVolumeFilesystem {
		t.Errorf("ephemeral volume mode %v", m)
	}
}

func TestSetDefaultsStatusAndIdempotence(t *testing.T) {
	p := &v1.Pod{Status: v1.PodStatus{PodIP: "10.0.0.1"}}
	podsource.SetDefaults(p)
	if len(p.Status.PodIPs) != 1 || p.Status.PodIPs[0].IP != "10.0.0.1" {
		t.Errorf("podIPs %v", p.Status.PodIPs)
	}
	p = &v1.Pod{Status: v1.PodStatus{PodIPs: []v1.PodIP{{IP: "fd00::1"}, {IP: "10.0.0.1"}}}}
	podsource.SetDefaults(p)
	if p.Status.PodIP != "fd00::1" {
		t.Errorf("podIP %q", p.Status.PodIP)
	}

	once := &v1.Pod{Spec: v1.PodSpec{HostNetwork: true, Containers: []v1.Container{{Name: "c", Image: "i",
		Ports:     []v1.ContainerPort{{ContainerPort: 1}},
		Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: resource.MustParse("0.5")}}}}}}
	podsource.SetDefaults(once)
	twice := once.DeepCopy()
	podsource.SetDefaults(twice)
	if !equality.Semantic.DeepEqual(once, twice) {
		t.Errorf("not idempotent:\n%+v\n%+v", once.Spec, twice.Spec)
	}
}
