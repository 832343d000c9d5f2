package manifest_test

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podsource/manifest"
)

const node = "Node-A"

func decoder(t testing.TB, source string, strict bool) *manifest.Decoder {
	t.Helper()
	d, err := manifest.NewDecoder(manifest.Options{NodeName: strings.ToLower(node), Source: source, Strict: strict})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

const webYAML = `# a comment
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: nginx
    image: nginx:1.27
    ports:
    - containerPort: 80
`

func TestPodGetsTheStaticPodFields(t *testing.T) {
	d := decoder(t, podsource.FileSource, false)
	pod, warnings, err := d.Pod([]byte(webYAML), "/etc/kubernetes/manifests/web.yaml")
	if err != nil || len(warnings) != 0 {
		t.Fatalf("Pod = %v, %v", warnings, err)
	}
	if pod.Name != "web-node-a" || pod.Namespace != "default" || pod.Spec.NodeName != "node-a" {
		t.Errorf("name %s/%s node %q", pod.Namespace, pod.Name, pod.Spec.NodeName)
	}
	if pod.APIVersion != "" || pod.Kind != "" {
		t.Errorf("type meta kept: %v", pod.TypeMeta)
	}
	if len(pod.UID) != 32 || pod.Annotations[podsource.ConfigHashAnnotationKey] != string(pod.UID) {
		t.Errorf("UID %q, hash annotation %q", pod.UID, pod.Annotations[podsource.ConfigHashAnnotationKey])
	}
	if pod.Status.Phase != v1.PodPending {
		t.Errorf("phase %q", pod.Status.Phase)
	}
	want := v1.Toleration{Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute}
	if len(pod.Spec.Tolerations) != 1 || pod.Spec.Tolerations[0] != want {
		t.Errorf("tolerations %v", pod.Spec.Tolerations)
	}
	// The API server's defaults are there.
	c := pod.Spec.Containers[0]
	if pod.Spec.RestartPolicy != v1.RestartPolicyAlways || c.ImagePullPolicy != v1.PullIfNotPresent || c.Ports[0].Protocol != v1.ProtocolTCP {
		t.Errorf("defaults missing: %v %v %v", pod.Spec.RestartPolicy, c.ImagePullPolicy, c.Ports[0].Protocol)
	}
	if pod.Labels["app"] != "web" {
		t.Errorf("labels %v", pod.Labels)
	}
}

func TestUIDIsAStableHashOfPodNodeAndLocation(t *testing.T) {
	d := decoder(t, podsource.FileSource, false)
	uid := func(d *manifest.Decoder, data, location string) types.UID {
		t.Helper()
		p, _, err := d.Pod([]byte(data), location)
		if err != nil {
			t.Fatal(err)
		}
		return p.UID
	}
	base := uid(d, webYAML, "/m/web.yaml")
	if again := uid(d, webYAML, "/m/web.yaml"); again != base {
		t.Errorf("UID not stable: %s, %s", base, again)
	}
	// JSON, another layout, and spelling out a default give the same pod.
	asJSON := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","labels":{"app":"web"}},
		"spec":{"restartPolicy":"Always","containers":[{"name":"nginx","image":"nginx:1.27","ports":[{"containerPort":80}]}]}}`
	if u := uid(d, asJSON, "/m/web.yaml"); u != base {
		t.Errorf("same pod in JSON has UID %s, want %s", u, base)
	}
	if u := uid(d, strings.Replace(webYAML, "1.27", "1.28", 1), "/m/web.yaml"); u == base {
		t.Error("an edit kept the UID")
	}
	if u := uid(d, webYAML, "/m/other.yaml"); u == base {
		t.Error("another path kept the UID")
	}
	other, err := manifest.NewDecoder(manifest.Options{NodeName: "node-b", Source: podsource.FileSource})
	if err != nil {
		t.Fatal(err)
	}
	if u := uid(other, webYAML, "/m/web.yaml"); u == base {
		t.Error("another node kept the UID")
	}
	// An explicit UID is kept, and is the hash.
	withUID := strings.Replace(webYAML, "  name: web\n", "  name: web\n  uid: my-uid\n", 1)
	p, _, err := d.Pod([]byte(withUID), "/m/web.yaml")
	if err != nil || p.UID != "my-uid" || p.Annotations[podsource.ConfigHashAnnotationKey] != "my-uid" {
		t.Errorf("explicit uid: %v, %v", p, err)
	}
}

func TestHTTPSourceRules(t *testing.T) {
	d := decoder(t, podsource.HTTPSource, false)
	res, err := d.Pods([]byte(webYAML), "http://example.com/pods")
	if err != nil || len(res.Pods) != 1 {
		t.Fatalf("Pods = %+v, %v", res, err)
	}
	if tol := res.Pods[0].Spec.Tolerations; len(tol) != 0 {
		t.Errorf("http pod got tolerations %v", tol)
	}
	f := decoder(t, podsource.FileSource, false)
	fp, _, err := f.Pod([]byte(webYAML), "http://example.com/pods")
	if err != nil || fp.UID == res.Pods[0].UID {
		t.Errorf("file and http rules give the same UID: %v", err)
	}
}

func TestUnknownFields(t *testing.T) {
	data := strings.Replace(webYAML, "    image: nginx:1.27\n", "    image: nginx:1.27\n    imagePullPolcy: Never\n", 1)
	p, warnings, err := decoder(t, podsource.FileSource, false).Pod([]byte(data), "/m/web.yaml")
	if err != nil || len(warnings) != 1 || !strings.Contains(warnings[0], `unknown field "spec.containers[0].imagePullPolcy"`) {
		t.Fatalf("lenient: %v, %v", warnings, err)
	}
	if p.Spec.Containers[0].ImagePullPolicy != v1.PullIfNotPresent {
		t.Errorf("unknown field applied: %v", p.Spec.Containers[0].ImagePullPolicy)
	}
	_, _, err = decoder(t, podsource.FileSource, true).Pod([]byte(data), "/m/web.yaml")
	if err == nil || !strings.Contains(err.Error(), `unknown field "spec.containers[0].imagePullPolcy"`) {
		t.Errorf("strict: %v", err)
	}
	dup := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","name":"b"},"spec":{"containers":[{"name":"c","image":"i"}]}}`
	if _, _, err := decoder(t, podsource.FileSource, true).Pod([]byte(dup), "/m/x.json"); err == nil || !strings.Contains(err.Error(), `duplicate field "metadata.name"`) {
		t.Errorf("strict duplicate: %v", err)
	}
	// Field names are case sensitive, as the API server's.
	upper := strings.Replace(webYAML, "  containers:", "  Containers:", 1)
	if _, _, err := decoder(t, podsource.FileSource, false).Pod([]byte(upper), "/m/web.yaml"); err == nil ||
		!strings.Contains(err.Error(), "spec.containers: Required value") {
		t.Errorf("case-insensitive decoding: %v", err)
	}
}

func TestBadManifests(t *testing.T) {
	for name, tc := range map[string]struct{ data, want string }{
		"empty":          {"", "kind is missing"},
		"YAML error":     {"apiVersion: v1\nkind: Pod\nmetadata: [\n", "YAML"},
		"JSON error":     {`{"apiVersion":"v1","kind":"Pod",`, "decode"},
		"not an object":  {"- a\n- b\n", "decode"},
		"no kind":        {"apiVersion: v1\nmetadata: {name: a}\n", "kind is missing"},
		"wrong kind":     {"apiVersion: v1\nkind: Service\nmetadata: {name: a}\n", `kind "Service"`},
		"wrong version":  {"apiVersion: v2\nkind: Pod\nmetadata: {name: a}\n", `apiVersion "v2"`},
		"a list":         {"apiVersion: v1\nkind: PodList\nitems: []\n", `kind "PodList"`},
		"no name":        {"apiVersion: v1\nkind: Pod\nspec: {containers: [{name: c, image: i}]}\n", "metadata.name: Required"},
		"invalid name":   {strings.Replace(webYAML, "name: web", "name: Web_1", 1), "metadata.name: Invalid value"},
		"bad namespace":  {strings.Replace(webYAML, "  name: web\n", "  name: web\n  namespace: kube_system\n", 1), "metadata.namespace: Invalid value"},
		"wrong type":     {strings.Replace(webYAML, "containerPort: 80", "containerPort: eighty", 1), "decode Pod"},
		"no containers":  {"apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {}\n", "spec.containers: Required value"},
		"dup containers": {"apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: i}, {name: c, image: i}]}\n", "spec.containers[1].name: Duplicate value"},
		"secret":         {"apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: i}], volumes: [{name: s, secret: {secretName: x}}]}\n", "static pods may not reference secrets"},
		"mirror":         {"apiVersion: v1\nkind: Pod\nmetadata: {name: a, annotations: {kubernetes.io/config.mirror: x}}\nspec: {containers: [{name: c, image: i}]}\n", "must not be marked as a mirror pod"},
	} {
		t.Run(name, func(t *testing.T) {
			p, _, err := decoder(t, podsource.FileSource, false).Pod([]byte(tc.data), "/m/x.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Pod = %v, %v; want an error containing %q", p, err, tc.want)
			}
		})
	}
}

func TestExtraYAMLDocumentsAreIgnoredWithAWarning(t *testing.T) {
	data := webYAML + "---\n" + strings.Replace(webYAML, "name: web", "name: second", 1)
	p, warnings, err := decoder(t, podsource.FileSource, false).Pod([]byte(data), "/m/web.yaml")
	if err != nil || p.Name != "web-node-a" {
		t.Fatalf("Pod = %v, %v", p, err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "2 YAML documents") {
		t.Errorf("warnings = %v", warnings)
	}
	// A document separator alone is not a second document.
	if _, warnings, _ := decoder(t, podsource.FileSource, false).Pod([]byte("---\n"+webYAML+"---\n"), "/m/web.yaml"); len(warnings) != 0 {
		t.Errorf("warnings = %v", warnings)
	}
}

func TestPodList(t *testing.T) {
	list := `apiVersion: v1
kind: PodList
items:
- metadata: {name: a}
  spec: {containers: [{name: c, image: busybox}]}
- metadata: {name: Bad_Name}
  spec: {containers: [{name: c, image: busybox}]}
- metadata: {name: b, namespace: kube-system}
  spec: {containers: [{name: c, image: busybox, bogus: 1}]}
- metadata: {name: c}
  spec: {}
`
	res, err := decoder(t, podsource.HTTPSource, false).Pods([]byte(list), "http://h/pods")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range res.Pods {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	if strings.Join(names, ",") != "default/a-node-a,kube-system/b-node-a" {
		t.Errorf("pods = %v", names)
	}
	if len(res.Invalid) != 2 || res.Invalid[0].Index != 1 || res.Invalid[1].Index != 3 ||
		res.Invalid[1].Namespace != "default" || res.Invalid[1].Name != "c-node-a" ||
		!strings.Contains(res.Invalid[1].Err.Error(), "items[3]: spec.containers: Required value") {
		t.Errorf("invalid = %+v", res.Invalid)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], `items[2]: unknown field "spec.containers[0].bogus"`) {
		t.Errorf("warnings = %v", res.Warnings)
	}
	// Strict: the item with an unknown field is invalid, the others stay.
	res, err = decoder(t, podsource.HTTPSource, true).Pods([]byte(list), "http://h/pods")
	if err != nil || len(res.Pods) != 1 || len(res.Invalid) != 3 {
		t.Errorf("strict: %+v, %v", res, err)
	}
	if _, err := decoder(t, podsource.HTTPSource, false).Pods([]byte("apiVersion: v1\nkind: List\nitems: []\n"), "u"); err == nil {
		t.Error("a List was accepted")
	}
}

func TestNewDecoderValidates(t *testing.T) {
	for _, opts := range []manifest.Options{
		{Source: "file"},
		{NodeName: "Not_A_Node", Source: "file"},
		{NodeName: "node-a"},
	} {
		if _, err := manifest.NewDecoder(opts); err == nil {
			t.Errorf("NewDecoder(%+v) accepted", opts)
		}
	}
}
