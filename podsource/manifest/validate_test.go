package manifest_test

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podsource/manifest"
)

// validPod is a defaulted static pod Validate accepts.
func validPod(mutate ...func(*v1.Pod)) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-node-a", Namespace: "default"},
		Spec: v1.PodSpec{
			Containers: []v1.Container{{
				Name: "c", Image: "nginx",
				Ports:        []v1.ContainerPort{{Name: "http", ContainerPort: 80}},
				VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []v1.Volume{{Name: "data"}},
		},
	}
	podsource.SetDefaults(p)
	for _, m := range mutate {
		m(p)
	}
	return p
}

func TestValidate(t *testing.T) {
	if err := manifest.Validate(validPod()); err != nil {
		t.Fatalf("valid pod rejected: %v", err)
	}
	ptr := func(v int64) *int64 { return &v }
	for name, tc := range map[string]struct {
		mutate func(*v1.Pod)
		want   string
	}{
		"label":            {func(p *v1.Pod) { p.Labels = map[string]string{"a b": "c"} }, "metadata.labels: Invalid value"},
		"restart policy":   {func(p *v1.Pod) { p.Spec.RestartPolicy = "Sometimes" }, "spec.restartPolicy: Unsupported value"},
		"dns policy":       {func(p *v1.Pod) { p.Spec.DNSPolicy = "Everywhere" }, "spec.dnsPolicy: Unsupported value"},
		"dns none":         {func(p *v1.Pod) { p.Spec.DNSPolicy = v1.DNSNone }, "spec.dnsConfig: Required value"},
		"grace":            {func(p *v1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr(-1) }, "spec.terminationGracePeriodSeconds"},
		"deadline":         {func(p *v1.Pod) { p.Spec.ActiveDeadlineSeconds = ptr(0) }, "spec.activeDeadlineSeconds"},
		"container name":   {func(p *v1.Pod) { p.Spec.Containers[0].Name = "C" }, "spec.containers[0].name: Invalid value"},
		"init name clash":  {func(p *v1.Pod) { p.Spec.InitContainers = []v1.Container{p.Spec.Containers[0]} }, "spec.containers[0].name: Duplicate value"},
		"image":            {func(p *v1.Pod) { p.Spec.Containers[0].Image = "" }, "spec.containers[0].image: Required value"},
		"pull policy":      {func(p *v1.Pod) { p.Spec.Containers[0].ImagePullPolicy = "Sometimes" }, "imagePullPolicy: Unsupported value"},
		"port":             {func(p *v1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 0 }, "ports[0].containerPort: Invalid value"},
		"host port":        {func(p *v1.Pod) { p.Spec.Containers[0].Ports[0].HostPort = 70000 }, "ports[0].hostPort: Invalid value"},
		"host network":     {func(p *v1.Pod) { p.Spec.HostNetwork = true; p.Spec.Containers[0].Ports[0].HostPort = 81 }, "must match `containerPort`"},
		"protocol":         {func(p *v1.Pod) { p.Spec.Containers[0].Ports[0].Protocol = "ICMP" }, "ports[0].protocol: Unsupported value"},
		"port name":        {func(p *v1.Pod) { p.Spec.Containers[0].Ports[0].Name = "not a name" }, "ports[0].name: Invalid value"},
		"env name":         {func(p *v1.Pod) { p.Spec.Containers[0].Env = []v1.EnvVar{{Value: "x"}} }, "env[0].name: Required value"},
		"mount":            {func(p *v1.Pod) { p.Spec.Containers[0].VolumeMounts[0].Name = "nope" }, "volumeMounts[0].name: Not found"},
		"mount path":       {func(p *v1.Pod) { p.Spec.Containers[0].VolumeMounts[0].MountPath = "" }, "volumeMounts[0].mountPath: Required value"},
		"volume name":      {func(p *v1.Pod) { p.Spec.Volumes = append(p.Spec.Volumes, p.Spec.Volumes[0]) }, "spec.volumes[1].name: Duplicate value"},
		"two sources":      {func(p *v1.Pod) { p.Spec.Volumes[0].HostPath = &v1.HostPathVolumeSource{Path: "/x"} }, "exactly 1 volume source, found 2"},
		"requests > limit": {func(p *v1.Pod) { setResources(p, "2", "1") }, "must be less than or equal to cpu limit of 1"},
		"service account":  {func(p *v1.Pod) { p.Spec.ServiceAccountName = "default" }, "may not reference serviceaccounts"},
		"pull secret":      {func(p *v1.Pod) { p.Spec.ImagePullSecrets = []v1.LocalObjectReference{{Name: "s"}} }, "spec.imagePullSecrets: Forbidden"},
		"env secret": {func(p *v1.Pod) {
			p.Spec.Containers[0].Env = []v1.EnvVar{{Name: "x", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{Key: "k"}}}}
		}, "spec.containers[0].env[0]: Forbidden: static pods may not reference secrets"},
		"envFrom config map": {func(p *v1.Pod) {
			p.Spec.Containers[0].EnvFrom = []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{}}}
		}, "may not reference configmaps"},
		"pvc": {func(p *v1.Pod) {
			p.Spec.Volumes[0].EmptyDir = nil
			p.Spec.Volumes[0].PersistentVolumeClaim = &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}
		}, "may not reference persistentvolumeclaims"},
		"projected token": {func(p *v1.Pod) {
			p.Spec.Volumes[0].EmptyDir = nil
			p.Spec.Volumes[0].Projected = &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Path: "t"}}}}
		}, "spec.volumes[0].projected.sources[0]: Forbidden"},
		"resource claims": {func(p *v1.Pod) { p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu"}} }, "may not reference resourceclaims"},
	} {
		t.Run(name, func(t *testing.T) {
			err := manifest.Validate(validPod(tc.mutate))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// Allowed volume kinds and projections.
	ok := validPod(func(p *v1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes,
			v1.Volume{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/etc"}}},
			v1.Volume{Name: "info", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{
				Sources: []v1.VolumeProjection{{DownwardAPI: &v1.DownwardAPIProjection{}}}}}})
		setResources(p, "1", "2")
	})
	if err := manifest.Validate(ok); err != nil {
		t.Errorf("valid volumes rejected: %v", err)
	}
}

func setResources(p *v1.Pod, request, limit string) {
	p.Spec.Containers[0].Resources = v1.ResourceRequirements{
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse(request)},
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse(limit)},
	}
}
