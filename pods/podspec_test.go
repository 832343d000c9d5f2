package pods

import (
	goruntime "runtime"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	ndffeatures "k8s.io/component-helpers/nodedeclaredfeatures/features"
	ndftypes "k8s.io/component-helpers/nodedeclaredfeatures/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/features"
)

func sysctlPod(hostNet, hostIPC bool, names ...string) *v1.Pod {
	p := &v1.Pod{Spec: v1.PodSpec{HostNetwork: hostNet, HostIPC: hostIPC, SecurityContext: &v1.PodSecurityContext{}}}
	for _, n := range names {
		p.Spec.SecurityContext.Sysctls = append(p.Spec.SecurityContext.Sysctls, v1.Sysctl{Name: n, Value: "1"})
	}
	return p
}

func TestSafeSysctlsByKernel(t *testing.T) {
	if got := SafeSysctls("4.4.0"); slices.Contains(got, "net.ipv4.tcp_keepalive_time") || !slices.Contains(got, "net.ipv4.ip_local_reserved_ports") {
		t.Errorf("4.4 kernel: %v", got)
	}
	if got := SafeSysctls("6.18.44-fc-v1272"); len(got) != len(safeSysctls) {
		t.Errorf("6.18 kernel: %d of %d safe sysctls", len(got), len(safeSysctls))
	}
	if got := SafeSysctls(""); len(got) != 5 {
		t.Errorf("unknown kernel: %v, want the 5 safe on every kernel", got)
	}
}

func TestSysctls(t *testing.T) {
	h, err := Sysctls("6.1.0", []string{"kernel.msg*", "net.core.somaxconn"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		pod     *v1.Pod
		wantMsg string
	}{
		{"none", &v1.Pod{}, ""},
		{"safe", sysctlPod(false, false, "kernel.shm_rmid_forced", "net.ipv4.tcp_keepalive_time"), ""},
		{"safe with slashes", sysctlPod(false, false, "net/ipv4/ip_local_port_range"), ""},
		{"allowed unsafe by prefix", sysctlPod(false, false, "kernel.msgmax"), ""},
		{"allowed unsafe by name", sysctlPod(false, false, "net.core.somaxconn"), ""},
		{"unsafe", sysctlPod(false, false, "kernel.sem"), `forbidden sysctl: "kernel.sem" not allowlisted`},
		{"net with hostNetwork", sysctlPod(true, false, "net.ipv4.tcp_syncookies"), `forbidden sysctl: "net.ipv4.tcp_syncookies" not allowed with host Net enabled`},
		{"ipc with hostIPC", sysctlPod(false, true, "kernel.shm_rmid_forced"), `forbidden sysctl: "kernel.shm_rmid_forced" not allowed with host IPC enabled`},
	} {
		r := h.Admit(AdmitAttributes{Pod: tc.pod})
		if tc.wantMsg == "" {
			if !r.Admit {
				t.Errorf("%s: rejected: %s", tc.name, r.Message)
			}
			continue
		}
		if r.Admit || r.Reason != "SysctlForbidden" || r.Message != tc.wantMsg {
			t.Errorf("%s: %+v, want SysctlForbidden %q", tc.name, r, tc.wantMsg)
		}
	}
	for _, bad := range []string{"kernel.msg**", "vm.swappiness", "Kernel.sem"} {
		if _, err := Sysctls("6.1.0", []string{bad}); err == nil {
			t.Errorf("allowedUnsafeSysctls %q accepted", bad)
		}
	}
}

func TestAppArmorAdmission(t *testing.T) {
	runtimeDefault := &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeRuntimeDefault}
	withField := &v1.Pod{Status: v1.PodStatus{Phase: v1.PodPending}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "a",
		SecurityContext: &v1.SecurityContext{AppArmorProfile: runtimeDefault}}}}}
	withAnnotation := &v1.Pod{Status: v1.PodStatus{Phase: v1.PodPending}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "a"}}}}
	withAnnotation.Annotations = map[string]string{v1.DeprecatedAppArmorBetaContainerAnnotationKeyPrefix + "a": "localhost/p"}
	unconfined := &v1.Pod{Status: v1.PodStatus{Phase: v1.PodPending}, Spec: v1.PodSpec{SecurityContext: &v1.PodSecurityContext{
		AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeUnconfined}}, Containers: []v1.Container{{Name: "a"}}}}
	emptyLocal := &v1.Pod{Status: v1.PodStatus{Phase: v1.PodPending}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "a",
		SecurityContext: &v1.SecurityContext{AppArmorProfile: &v1.AppArmorProfile{Type: v1.AppArmorProfileTypeLocalhost, LocalhostProfile: ptr.To(" ")}}}}}}

	disabled := AppArmor(false)
	for _, p := range []*v1.Pod{withField, withAnnotation} {
		r := disabled.Admit(AdmitAttributes{Pod: p})
		if r.Admit || r.Reason != "AppArmor" || r.Message != "Cannot enforce AppArmor: AppArmor is not enabled on the host" {
			t.Errorf("host without AppArmor: %+v", r)
		}
	}
	static := withField.DeepCopy()
	static.Status.Phase = ""
	if r := disabled.Admit(AdmitAttributes{Pod: static}); r.Admit {
		t.Errorf("a static pod (no phase) asking for AppArmor was admitted on a host without it")
	}
	running := withField.DeepCopy()
	running.Status.Phase = v1.PodRunning
	if r := disabled.Admit(AdmitAttributes{Pod: running}); !r.Admit {
		t.Errorf("a running pod is not checked again: %+v", r)
	}
	if r := disabled.Admit(AdmitAttributes{Pod: unconfined}); !r.Admit {
		t.Errorf("unconfined needs no AppArmor: %+v", r)
	}
	enabled := AppArmor(true)
	if r := enabled.Admit(AdmitAttributes{Pod: withField}); !r.Admit {
		t.Errorf("host with AppArmor: %+v", r)
	}
	if r := enabled.Admit(AdmitAttributes{Pod: emptyLocal}); r.Admit || !strings.Contains(r.Message, "invalid empty AppArmor profile name") {
		t.Errorf("empty localhost profile: %+v", r)
	}
}

func TestPodFeatures(t *testing.T) {
	h := PodFeatures()
	if r := h.Admit(AdmitAttributes{Pod: &v1.Pod{Spec: v1.PodSpec{HostUsers: ptr.To(true)}}}); !r.Admit {
		t.Errorf("hostUsers true: %+v", r)
	}
	if r := h.Admit(AdmitAttributes{Pod: &v1.Pod{Spec: v1.PodSpec{HostUsers: ptr.To(false)}}}); r.Admit || r.Reason != "PodFeatureUnsupported" {
		t.Errorf("hostUsers false: %+v", r)
	}
	if r := h.Admit(AdmitAttributes{Pod: &v1.Pod{Spec: v1.PodSpec{ResourceClaims: []v1.PodResourceClaim{{Name: "gpu"}}}}}); r.Admit || r.Reason != "PodFeatureUnsupported" {
		t.Errorf("resource claims: %+v", r)
	}
	if r := PodFeatures(FeatureUserNamespaces).Admit(AdmitAttributes{Pod: &v1.Pod{Spec: v1.PodSpec{HostUsers: ptr.To(false)}}}); !r.Admit {
		t.Errorf("hostUsers false on a node with user namespaces: %+v", r)
	}
	if r := PodFeatures(FeatureResourceClaims).Admit(AdmitAttributes{Pod: &v1.Pod{Spec: v1.PodSpec{ResourceClaims: []v1.PodResourceClaim{{Name: "gpu"}}}}}); !r.Admit {
		t.Errorf("resource claims on a node with DRA: %+v", r)
	}
	dev := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "a", VolumeDevices: []v1.VolumeDevice{{Name: "raw", DevicePath: "/dev/xvda"}}}}}}
	if r := h.Admit(AdmitAttributes{Pod: dev}); r.Admit || r.Reason != "PodFeatureUnsupported" || !strings.Contains(r.Message, `"raw"`) {
		t.Errorf("volume devices: %+v", r)
	}
	img := &v1.Pod{Spec: v1.PodSpec{Volumes: []v1.Volume{{Name: "tools", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "busybox"}}}}}}
	if r := h.Admit(AdmitAttributes{Pod: img}); !r.Admit {
		t.Errorf("image volume (the runtime mounts it; a runtime without image volumes fails the container): %+v", r)
	}
}

func TestDeclaredFeaturesAdmitsRestartAllContainers(t *testing.T) {
	h, err := criDeclaredFeatures(t)
	if err != nil {
		t.Fatal(err)
	}
	never := v1.ContainerRestartPolicyNever
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "a", RestartPolicy: &never,
		RestartPolicyRules: []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestartAllContainers,
			ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}}}}}
	if r := h.Admit(AdmitAttributes{Pod: pod, Node: admitNode()}); !r.Admit {
		t.Errorf("RestartAllContainers on a node implementing it: %+v", r)
	}
	if r := h.Admit(AdmitAttributes{Pod: &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "a"}}}}, Node: admitNode()}); !r.Admit {
		t.Errorf("plain pod: %+v", r)
	}
}

func TestGeneralPredicatesOSAndGroupsPolicy(t *testing.T) {
	admit := GeneralPredicates(klog.Background())
	strict := v1.SupplementalGroupsPolicyStrict
	for _, tc := range []struct {
		name       string
		pod        func(*v1.Pod)
		node       func(*v1.Node)
		wantReason string
	}{
		{"os label of another OS", func(p *v1.Pod) { p.Labels = map[string]string{v1.LabelOSStable: "windows"} }, nil, "PodOSSelectorNodeLabelDoesNotMatch"},
		{"os label of this OS", func(p *v1.Pod) { p.Labels = map[string]string{v1.LabelOSStable: goruntime.GOOS} }, nil, ""},
		{"spec.os of another OS", func(p *v1.Pod) { p.Spec.OS = &v1.PodOS{Name: "windows"} }, nil, "PodOSNotSupported"},
		{"Strict groups policy unsupported", func(p *v1.Pod) {
			p.Spec.SecurityContext = &v1.PodSecurityContext{SupplementalGroupsPolicy: &strict}
		}, nil, "SupplementalGroupsPolicyNotSupported"},
		{"Strict groups policy supported", func(p *v1.Pod) {
			p.Spec.SecurityContext = &v1.PodSecurityContext{SupplementalGroupsPolicy: &strict}
		}, func(n *v1.Node) { n.Status.Features = &v1.NodeFeatures{SupplementalGroupsPolicy: ptr.To(true)} }, ""},
	} {
		pod, node := podRequesting("a", "", ""), admitNode()
		tc.pod(pod)
		if tc.node != nil {
			tc.node(node)
		}
		r := admit.Admit(AdmitAttributes{Pod: pod, Node: node})
		if r.Admit != (tc.wantReason == "") || r.Reason != tc.wantReason {
			t.Errorf("%s: %+v, want reason %q", tc.name, r, tc.wantReason)
		}
	}
}

// criDeclaredFeatures is the DeclaredFeatures handler of a CRI node with
// the default gates.
func criDeclaredFeatures(t *testing.T) (AdmitHandler, error) {
	t.Helper()
	own, err := NodeDeclaredFeatures("v1.37.2+nodekit.0.1.0", CRIFeatures(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return DeclaredFeatures("v1.37.2+nodekit.0.1.0", own)
}

// TestNodeDeclaredFeaturesFollowGatesAndRuntime: a gate turned off drops
// its feature, as on the kubelet, and a runtime declares only what it
// supports.
func TestNodeDeclaredFeaturesFollowGatesAndRuntime(t *testing.T) {
	gates, err := features.New(klog.Background(), map[string]bool{
		"ExtendWebSocketsToKubelet":               false,
		"InPlacePodLevelResourcesVerticalScaling": false,
		"ContainerRestartRules":                   false,
		"RestartAllContainersOnContainerExits":    false,
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := NodeDeclaredFeatures("v1.37.2+nodekit.0.1.0", CRIFeatures(), gates)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"InPlacePodVerticalScalingInitContainers"}; !slices.Equal(got, want) {
		t.Errorf("gates off: NodeDeclaredFeatures = %v, want %v", got, want)
	}
	got, err = NodeDeclaredFeatures("v1.37.2+nodekit.0.1.0", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || len(got) != 0 {
		t.Errorf("a runtime supporting nothing: NodeDeclaredFeatures = %#v, want empty, not nil", got)
	}
	got, err = NodeDeclaredFeatures("v1.37.2+nodekit.0.1.0", []string{"ExtendWebSocketsToKubelet"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ExtendWebSocketsToKubelet"}; !slices.Equal(got, want) {
		t.Errorf("a runtime supporting WebSockets: NodeDeclaredFeatures = %v, want %v", got, want)
	}
	// The handler refuses a pod needing a feature the node turned off.
	h, err := DeclaredFeatures("v1.37.2+nodekit.0.1.0", []string{"InPlacePodVerticalScalingInitContainers"})
	if err != nil {
		t.Fatal(err)
	}
	never := v1.ContainerRestartPolicyNever
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "a", RestartPolicy: &never,
		RestartPolicyRules: []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestartAllContainers,
			ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: v1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{42}}}}}}}}
	if r := h.Admit(AdmitAttributes{Pod: pod, Node: admitNode()}); r.Admit || r.Reason != ReasonPodFeatureUnsupported {
		t.Errorf("RestartAllContainers with its gate off: %+v", r)
	}
}

func TestNodeDeclaredFeatures(t *testing.T) {
	got, err := NodeDeclaredFeatures("v1.37.2+nodekit.0.1.0", CRIFeatures(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ExtendWebSocketsToKubelet", "InPlacePodLevelResourcesVerticalScaling", "InPlacePodVerticalScalingInitContainers", "RestartAllContainersOnContainerExits"}; !slices.Equal(got, want) {
		t.Errorf("NodeDeclaredFeatures = %v, want %v", got, want)
	}
	if _, err := NodeDeclaredFeatures("not a version", CRIFeatures(), nil); err == nil {
		t.Error("a kubelet version that does not parse was accepted")
	}
	// Every feature of the registry is either implemented or named as not,
	// with a reason: a feature upstream adds fails here until judged.
	for _, f := range ndffeatures.AllFeatures {
		name := f.Name()
		declared := slices.Contains(got, name)
		reason, undeclared := undeclaredFeatures[name]
		switch {
		case declared && undeclared:
			t.Errorf("%s is declared and listed as not implemented (%s)", name, reason)
		case !declared && !undeclared:
			t.Errorf("node feature %s is neither declared nor listed as not implemented with a reason", name)
		}
	}
	for name := range undeclaredFeatures {
		if !slices.ContainsFunc(ndffeatures.AllFeatures, func(f ndftypes.Feature) bool { return f.Name() == name }) {
			t.Errorf("undeclaredFeatures lists %s, which the registry does not have", name)
		}
	}
}

func TestDeclaredFeaturesAdmitsWhatTheNodeDeclares(t *testing.T) {
	h, err := criDeclaredFeatures(t)
	if err != nil {
		t.Fatal(err)
	}
	// bindMountOptions need VolumeBindMountOptions, not implemented.
	pod := &v1.Pod{Spec: v1.PodSpec{Containers: []v1.Container{{Name: "a",
		VolumeMounts: []v1.VolumeMount{{Name: "v", MountPath: "/v", BindMountOptions: []string{string(v1.BindMountOptionNoExec)}}}}}}}
	node := admitNode()
	r := h.Admit(AdmitAttributes{Pod: pod, Node: node})
	if r.Admit || r.Message != "Pod requires node features that are not available: VolumeBindMountOptions" {
		t.Errorf("bindMountOptions: %+v", r)
	}
	// A Node still carrying another agent's declaration (after a
	// handover) does not make the feature this node's.
	node.Status.DeclaredFeatures = []string{"VolumeBindMountOptions"}
	if r := h.Admit(AdmitAttributes{Pod: pod, Node: node}); r.Admit || r.Reason != "PodFeatureUnsupported" {
		t.Errorf("bindMountOptions on a node whose object declares them: %+v", r)
	}
}
