package podsource

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// benchPod is a pod as the API server sends it to a node in nodebench's
// burst: one busybox container with the API server's defaults, two
// managed fields entries, two default tolerations, Pending.
func benchPod(i int) *v1.Pod {
	t0 := metav1.NewTime(time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC))
	grace := int64(30)
	seconds := int64(300)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("burst-%03d", i), Namespace: "default", UID: types.UID(fmt.Sprintf("uid-%03d", i)),
			ResourceVersion: strconv.Itoa(1000 + i), CreationTimestamp: t0, Labels: map[string]string{"app": "burst"},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "nodebench", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &t0, FieldsType: "FieldsV1",
					FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"c\"}":{".":{},"f:command":{},"f:image":{},"f:name":{}}}}}`)}},
				{Manager: "kube-scheduler", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &t0, FieldsType: "FieldsV1", Subresource: "status",
					FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{".":{},"k:{\"type\":\"PodScheduled\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},"f:status":{},"f:type":{}}}}}`)}},
			},
		},
		Spec: v1.PodSpec{
			NodeName: "nb-fakecri", RestartPolicy: v1.RestartPolicyAlways, DNSPolicy: v1.DNSClusterFirst, SchedulerName: "default-scheduler",
			TerminationGracePeriodSeconds: &grace, SecurityContext: &v1.PodSecurityContext{}, EnableServiceLinks: new(true),
			PreemptionPolicy: new(v1.PreemptLowerPriority), Priority: new(int32(0)),
			Containers: []v1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "3600"},
				TerminationMessagePath: v1.TerminationMessagePathDefault, TerminationMessagePolicy: v1.TerminationMessageReadFile,
				ImagePullPolicy: v1.PullIfNotPresent}},
			Tolerations: []v1.Toleration{
				{Key: v1.TaintNodeNotReady, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: &seconds},
				{Key: v1.TaintNodeUnreachable, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: &seconds},
			},
		},
		Status: v1.PodStatus{Phase: v1.PodPending, QOSClass: v1.PodQOSBestEffort,
			Conditions: []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: t0}}},
	}
}

// BenchmarkMergeStatusChange merges the API source's snapshot of 100 pods
// in which one pod's status changed (a new object with a new
// resourceVersion), as every status write of a 100-pod burst comes back:
// the commonest merge of a burst, a reconcile.
func BenchmarkMergeStatusChange(b *testing.B) {
	ctx := context.Background()
	c, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	pods := make([]*v1.Pod, 100)
	for i := range pods {
		pods[i] = benchPod(i)
	}
	c.merge(ctx, APIServerSource, pods)
	rv := 2000
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		k := i % len(pods)
		p := pods[k].DeepCopy()
		rv++
		p.ResourceVersion = strconv.Itoa(rv)
		p.Status.Phase = v1.PodRunning
		p.Status.PodIP = "10.88.0." + strconv.Itoa(k)
		snapshot := make([]*v1.Pod, len(pods))
		copy(snapshot, pods)
		snapshot[k] = p
		pods = snapshot
		if u := c.merge(ctx, APIServerSource, pods); len(u) != 1 || u[0].Op != OpReconcile {
			b.Fatalf("updates %v, want one reconcile", u)
		}
		p = pods[k].DeepCopy()
		rv++
		p.ResourceVersion = strconv.Itoa(rv)
		p.Status.Phase = v1.PodPending
		pods[k] = p
		c.merge(ctx, APIServerSource, pods)
	}
}
