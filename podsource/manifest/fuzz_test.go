package manifest_test

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podsource/manifest"
)

// FuzzDecode feeds arbitrary manifests to the decoder: it must never panic,
// and every pod it accepts must be valid, completely defaulted, carry the
// static pod fields, and come out the same from the same bytes.
//
//	go test -run='^$' -fuzz=FuzzDecode -fuzztime=1m ./podsource/manifest/
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		webYAML,
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","uid":"u"},"spec":{"hostNetwork":true,"containers":[{"name":"c","image":"i:latest","ports":[{"containerPort":53,"protocol":"UDP"}],"resources":{"limits":{"cpu":"1.0001","memory":"1Gi"}},"livenessProbe":{"httpGet":{"port":80}}}],"volumes":[{"name":"v"},{"name":"h","hostPath":{"path":"/x"}}]}}`,
		"apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: a}\n  spec: {containers: [{name: c, image: i}]}\n- metadata: {name: a}\n",
		"apiVersion: v1\nkind: Pod\nmetadata: {name: a, namespace: kube-system, labels: {x: y}}\nspec:\n  initContainers: [{name: i, image: busybox@sha256:0000000000000000000000000000000000000000000000000000000000000000}]\n  containers: [{name: c, image: i, env: [{name: N, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]}]\n  tolerations: [{operator: Exists, effect: NoExecute, tolerationSeconds: 5}]\n",
		"---\n---\napiVersion: v1\n",
		"{",
		"",
		"kind: Pod\napiVersion: v1\nmetadata:\n  name: &a x\n  labels: {*a: b}\n",
	} {
		f.Add([]byte(seed))
	}
	d, err := manifest.NewDecoder(manifest.Options{NodeName: "node-a", Source: podsource.FileSource})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		pod, _, err := d.Pod(data, "/m/f.yaml")
		if err == nil {
			checkPod(t, pod)
			again, _, err := d.Pod(data, "/m/f.yaml")
			if err != nil || again.UID != pod.UID || !equality.Semantic.DeepEqual(again, pod) {
				t.Fatalf("decoding again gave %v, %v", again, err)
			}
		}
		res, err := d.Pods(data, "http://h/p")
		if err == nil {
			for _, p := range res.Pods {
				checkPod(t, p)
			}
			for _, item := range res.Invalid {
				if item.Err == nil {
					t.Fatalf("invalid item %d without an error", item.Index)
				}
			}
		}
	})
}

func checkPod(t *testing.T, pod *v1.Pod) {
	t.Helper()
	if pod == nil {
		t.Fatal("no pod and no error")
	}
	if err := manifest.Validate(pod); err != nil {
		t.Fatalf("accepted an invalid pod: %v", err)
	}
	if pod.UID == "" || pod.Annotations[podsource.ConfigHashAnnotationKey] != string(pod.UID) {
		t.Fatalf("UID %q, hash %q", pod.UID, pod.Annotations[podsource.ConfigHashAnnotationKey])
	}
	if !strings.HasSuffix(pod.Name, "-node-a") || pod.Spec.NodeName != "node-a" || pod.Namespace == "" || pod.Status.Phase != v1.PodPending {
		t.Fatalf("static fields: %s/%s on %q, %s", pod.Namespace, pod.Name, pod.Spec.NodeName, pod.Status.Phase)
	}
	defaulted := pod.DeepCopy()
	podsource.SetDefaults(defaulted)
	if !equality.Semantic.DeepEqual(defaulted, pod) {
		t.Fatalf("pod not completely defaulted:\n%v\n%v", pod, defaulted)
	}
}
