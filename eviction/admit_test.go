package eviction

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestAdmit(t *testing.T) {
	bestEffort := newPod("be")
	burstable := newPod("burstable", withRequest(v1.ResourceMemory, "1Mi"))
	storageOnly := newPod("storage-only", withRequest(v1.ResourceEphemeralStorage, "1Gi")) // still BestEffort
	statusQOS := newPod("status-qos", withRequest(v1.ResourceMemory, "1Mi"), func(p *v1.Pod) { p.Status.QOSClass = v1.PodQOSBestEffort })
	initOnly := newPod("init-only", func(p *v1.Pod) {
		p.Spec.InitContainers = []v1.Container{{Name: "i", Resources: v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceCPU: mustQ("1")}}}}
	})
	podLevel := newPod("pod-level", func(p *v1.Pod) {
		p.Spec.Resources = &v1.ResourceRequirements{Limits: v1.ResourceList{v1.ResourceMemory: mustQ("1Gi")}}
	})
	tolerates := newPod("tolerates", func(p *v1.Pod) {
		p.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeMemoryPressure, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}}
	})
	toleratesAll := newPod("tolerates-all", func(p *v1.Pod) {
		p.Spec.Tolerations = []v1.Toleration{{Operator: v1.TolerationOpExists}}
	})
	toleratesOther := newPod("tolerates-disk", func(p *v1.Pod) {
		p.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeDiskPressure, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}}
	})
	toleratesNoExecute := newPod("tolerates-noexecute", func(p *v1.Pod) {
		p.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeMemoryPressure, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute}}
	})
	critical := newPod("critical", withPriority(2000000000))
	static := newPod("static", withAnnotation("kubernetes.io/config.source", "file"))

	mem := []v1.NodeConditionType{v1.NodeMemoryPressure}
	disk := []v1.NodeConditionType{v1.NodeDiskPressure}
	memDisk := []v1.NodeConditionType{v1.NodeMemoryPressure, v1.NodeDiskPressure}
	pid := []v1.NodeConditionType{v1.NodePIDPressure}
	for _, tc := range []struct {
		conds []v1.NodeConditionType
		pod   *v1.Pod
		admit bool
	}{
		{nil, bestEffort, true},
		{mem, bestEffort, false},
		{mem, storageOnly, false},
		{mem, statusQOS, false},
		{mem, burstable, true},
		{mem, initOnly, true},
		{mem, podLevel, true},
		{mem, tolerates, true},
		{mem, toleratesAll, true},
		{mem, toleratesOther, false},
		{mem, toleratesNoExecute, false},
		{mem, critical, true},
		{disk, burstable, false},
		{disk, tolerates, false},
		{disk, critical, true},
		{disk, static, true},
		{memDisk, burstable, false},
		{pid, burstable, false},
	} {
		m, err := New(minimalOptions())
		if err != nil {
			t.Fatal(err)
		}
		m.conditions = tc.conds
		admit, reason, msg := m.Admit(tc.pod)
		if admit != tc.admit {
			t.Errorf("%v %s: admit %v, want %v", tc.conds, tc.pod.Name, admit, tc.admit)
			continue
		}
		if admit {
			if reason != "" || msg != "" {
				t.Errorf("%v %s: admitted with %q %q", tc.conds, tc.pod.Name, reason, msg)
			}
			continue
		}
		if reason != "Evicted" {
			t.Errorf("reason %q", reason)
		}
		want := map[string]string{
			"[MemoryPressure]":              "The node had condition: [MemoryPressure]. ",
			"[DiskPressure]":                "The node had condition: [DiskPressure]. ",
			"[MemoryPressure DiskPressure]": "The node had condition: [MemoryPressure DiskPressure]. ",
			"[PIDPressure]":                 "The node had condition: [PIDPressure]. ",
		}
		if key := formatConds(tc.conds); msg != want[key] {
			t.Errorf("%v %s: message %q, want %q", tc.conds, tc.pod.Name, msg, want[key])
		}
	}
}

func formatConds(c []v1.NodeConditionType) string {
	s := "["
	for i, x := range c {
		if i > 0 {
			s += " "
		}
		s += string(x)
	}
	return s + "]"
}
