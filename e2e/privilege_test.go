package e2e

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The least-privilege check runs once the whole e2e package ran (TestMain,
// after m.Run, whatever -run selected; it cannot be skipped): every request
// a node identity (system:node:<name>) made, as the apiserver's audit log
// recorded it, must be one the kubelet makes, on an object the node may
// touch, and none may have been refused, except those a test provokes on
// purpose and checks itself (see excuseDenials). It also proves that the
// apiserver runs the Node authorizer and NodeRestriction admission, from its
// command line and by a probe identity refused a read and a write of
// another node, and that every CSR a node identity created asks for a
// certificate of that identity. Its report lists the requests node
// identities made by verb and resource, with counts.

// privilegeProbe is the identity the final check uses to prove the Node
// authorizer and NodeRestriction refuse a node another node's object.
const privilegeProbe = "nodekit-privilege-probe"

// excused are the node identities whose refused requests a test provokes
// on purpose, with why and during which window (zero end: still open).
var excused struct {
	sync.Mutex
	windows []excuse
}

type excuse struct {
	node     string
	why      string
	from, to time.Time
}

// excuseDenials declares that requests of system:node:<node> refused from
// now until the returned func is called are provoked on purpose (say, an
// agent given another node's name, or the upstream kubelet, which this
// suite does not hold to nodekit's standard); the calling test checks
// them itself. The final check lists them apart.
func excuseDenials(node, why string) (end func()) {
	excused.Lock()
	defer excused.Unlock()
	i := len(excused.windows)
	excused.windows = append(excused.windows, excuse{node: node, why: why, from: time.Now().Add(-time.Second)})
	return func() {
		excused.Lock()
		defer excused.Unlock()
		excused.windows[i].to = time.Now().Add(time.Second)
	}
}

// excusedFor returns why a refused request of node at t is excused, or "".
func excusedFor(node string, t time.Time) string {
	excused.Lock()
	defer excused.Unlock()
	for _, w := range excused.windows {
		if w.node == node && !t.Before(w.from) && (w.to.IsZero() || t.Before(w.to)) {
			return w.why
		}
	}
	return ""
}

// nodeOf returns the node name of a node identity, "" for anyone else.
func nodeOf(r auditRecord) string {
	name, ok := strings.CutPrefix(r.User.Username, "system:node:")
	if !ok {
		return ""
	}
	return name
}

// requestKey is "verb resource[.group][/subresource]", or "verb <path>"
// for a request that names no object.
func requestKey(r auditRecord) string {
	o := r.ObjectRef
	if o == nil {
		u, err := url.Parse(r.RequestURI)
		if err != nil {
			return r.Verb + " " + r.RequestURI
		}
		return r.Verb + " " + u.Path
	}
	return r.Verb + " " + resourceKey(r)
}

// resourceKey is "resource[.group][/subresource]" of a request that names
// an object.
func resourceKey(r auditRecord) string {
	o := r.ObjectRef
	key := o.Resource
	if o.APIGroup != "" {
		key += "." + o.APIGroup
	}
	if o.Subresource != "" {
		key += "/" + o.Subresource
	}
	return key
}

// fieldSelector returns the request's field selector terms.
func fieldSelector(r auditRecord) []string {
	u, err := url.Parse(r.RequestURI)
	if err != nil {
		return nil
	}
	return strings.Split(u.Query().Get("fieldSelector"), ",")
}

// kubeletVerbs are what the kubelet may do to each resource
// (plugin/pkg/auth/authorizer/rbac/bootstrappolicy NodeRules, which the
// Node authorizer and NodeRestriction narrow to the node's own objects).
var kubeletVerbs = map[string][]string{
	"nodes":                      {"get", "list", "watch", "create", "update", "patch"},
	"nodes/status":               {"update", "patch"},
	"leases.coordination.k8s.io": {"get", "create", "update", "patch", "delete"},
	"pods":                       {"get", "list", "watch", "create", "delete"},
	"pods/status":                {"update", "patch"},
	"pods/eviction":              {"create"},
	"events":                     {"create", "update", "patch"},
	"events.events.k8s.io":       {"create", "update", "patch"},
	"certificatesigningrequests.certificates.k8s.io": {"create", "get", "list", "watch"},
	"secrets":                                    {"get", "list", "watch"},
	"configmaps":                                 {"get", "list", "watch"},
	"serviceaccounts/token":                      {"create"},
	"persistentvolumeclaims":                     {"get"},
	"persistentvolumeclaims/status":              {"get", "update", "patch"},
	"persistentvolumes":                          {"get"},
	"services":                                   {"get", "list", "watch"},
	"endpoints":                                  {"get"},
	"volumeattachments.storage.k8s.io":           {"get"},
	"csidrivers.storage.k8s.io":                  {"get", "list", "watch"},
	"csinodes.storage.k8s.io":                    {"get", "create", "update", "patch", "delete"},
	"runtimeclasses.node.k8s.io":                 {"get", "list", "watch"},
	"resourceclaims.resource.k8s.io":             {"get"},
	"resourceslices.resource.k8s.io":             {"deletecollection", "get", "list", "watch", "create", "update", "patch", "delete"},
	"serviceaccounts":                            {"get"},
	"clustertrustbundles.certificates.k8s.io":    {"get", "list", "watch"},
	"podcertificaterequests.certificates.k8s.io": {"get", "list", "watch", "create"},
	"tokenreviews.authentication.k8s.io":         {"create"},
	"subjectaccessreviews.authorization.k8s.io":  {"create"},
}

// outOfScope returns why a request of node r is not one a kubelet makes on
// its own objects, "" when it is. Objects the Node authorizer scopes by
// its graph (pods, secrets, configmaps, service account tokens, PVCs, PVs
// bound to the node's pods) are left to it: a request outside the graph is
// refused, and refusals are checked apart.
func outOfScope(node string, r auditRecord) string {
	o := r.ObjectRef
	if o == nil {
		// Discovery and version, read by every client.
		u, err := url.Parse(r.RequestURI)
		if err == nil && r.Verb == "get" && (u.Path == "/version" || u.Path == "/api" || u.Path == "/apis" ||
			strings.HasPrefix(u.Path, "/api/") || strings.HasPrefix(u.Path, "/apis/") || strings.HasPrefix(u.Path, "/openapi/")) {
			return ""
		}
		return "a non-resource request"
	}
	resource := strings.SplitN(requestKey(r), " ", 2)[1]
	verbs, ok := kubeletVerbs[resource]
	if !ok {
		return "a resource the kubelet never touches"
	}
	if !slices.Contains(verbs, r.Verb) {
		return "a verb the kubelet never uses on it"
	}
	selects := func(term string) bool { return slices.Contains(fieldSelector(r), term) }
	switch resource {
	case "nodes", "nodes/status":
		if o.Name == node || (o.Name == "" && (r.Verb == "list" || r.Verb == "watch") && selects("metadata.name="+node)) ||
			(o.Name == "" && r.Verb == "create") {
			return ""
		}
		return "another node's object"
	case "leases.coordination.k8s.io":
		if o.Namespace == "kube-node-lease" && (o.Name == node || (o.Name == "" && r.Verb == "create")) {
			return ""
		}
		return "another node's lease"
	case "pods":
		if (r.Verb == "list" || r.Verb == "watch") && o.Name == "" && !selects("spec.nodeName="+node) {
			return "pods not selected by spec.nodeName=" + node
		}
	case "secrets", "configmaps":
		if (r.Verb == "list" || r.Verb == "watch") && o.Name == "" && !slices.ContainsFunc(fieldSelector(r), func(s string) bool {
			return strings.HasPrefix(s, "metadata.name=")
		}) {
			return "a list of every " + o.Resource + " of a namespace"
		}
	}
	return ""
}

// privilegeReport is what the audit log shows of the node identities.
type privilegeReport struct {
	nodes    map[string]bool
	requests int
	// touched counts requests by key, refused ones included.
	touched map[string]int
	// offences are requests outside the kubelet's scope, and refusals not
	// excused.
	offences []string
	// excused are refusals a test provoked on purpose, and requests a
	// test made through kubectl with a node's credentials.
	excused map[string]int
	// graphLag counts, by request key, refusals of an object the same
	// identity was granted within graphLag after (see graphLag).
	graphLag map[string]int
}

// graphLag is how soon after a refusal the same node identity must have
// been granted the same object for the refusal to count as the Node
// authorizer's graph lagging behind a pod just bound: the authorizer learns
// a pod's secrets, configmaps and volumes from its own informer, so the
// first read of them right after the pod reaches the node can be refused
// (the kubelet meets the same race), and client-go's retry is granted.
// Retries back off: a projected service account token refused this way
// was granted 11.5 s later, its volume's retry having waited for the
// kube-root-ca.crt configMap, whose watch the same lag had refused.
const graphLag = 30 * time.Second

// objectKey names the object a request is for, whatever its verb (a
// refused watch is retried as a list and a watch): node identity,
// resource, namespace and name.
func objectKey(node string, r auditRecord) string {
	if r.ObjectRef == nil {
		return ""
	}
	o := r.ObjectRef
	return strings.Join([]string{node, resourceKey(r), o.Namespace, o.Name}, "|")
}

// auditNodeRequests classifies every request of a node identity in records
// except the probe's.
func auditNodeRequests(records []auditRecord) privilegeReport {
	rep := privilegeReport{nodes: map[string]bool{}, touched: map[string]int{}, excused: map[string]int{}, graphLag: map[string]int{}}
	granted := map[string][]time.Time{}
	for _, r := range records {
		if node := nodeOf(r); node != "" && r.Code < 300 && r.ObjectRef != nil && r.ObjectRef.Name != "" {
			k := objectKey(node, r)
			granted[k] = append(granted[k], r.RequestReceived)
		}
	}
	grantedSoonAfter := func(node string, r auditRecord) bool {
		if r.ObjectRef == nil || r.ObjectRef.Name == "" {
			return false
		}
		for _, t := range granted[objectKey(node, r)] {
			if t.After(r.RequestReceived) && t.Sub(r.RequestReceived) <= graphLag {
				return true
			}
		}
		return false
	}
	for _, r := range records {
		node := nodeOf(r)
		if node == "" || node == privilegeProbe {
			continue
		}
		rep.nodes[node] = true
		rep.requests++
		rep.touched[requestKey(r)]++
		scope := outOfScope(node, r)
		if r.Code == 403 && scope == "" {
			if grantedSoonAfter(node, r) {
				rep.graphLag[requestKey(r)]++
				continue
			}
			scope = "refused"
		}
		if scope == "" {
			continue
		}
		// A test may provoke refusals on purpose, or make requests with a
		// node's credentials through kubectl; the agent's own requests
		// outside its scope are never excused. A provoked request that
		// failed otherwise (a 504 when the API server timed out under load
		// before NodeRestriction refused it) did nothing either; one that
		// succeeded is never excused.
		if why := excusedFor(node, r.RequestReceived); why != "" && (r.Code >= 400 || strings.HasPrefix(r.UserAgent, "kubectl/")) {
			rep.excused[fmt.Sprintf("%s (%s)", node, why)]++
			continue
		}
		rep.offences = append(rep.offences, fmt.Sprintf("%s by %s: %s", r, node, scope))
	}
	return rep
}

// write prints the report: the node identities, each kind of request
// with its count, the excused refusals.
func (rep privilegeReport) write(w io.Writer) {
	fmt.Fprintf(w, "least privilege: %d requests by %d node identities in the audit log, by verb and resource:\n", rep.requests, len(rep.nodes))
	keys := make([]string, 0, len(rep.touched))
	for k := range rep.touched {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return rep.touched[keys[i]] > rep.touched[keys[j]] || rep.touched[keys[i]] == rep.touched[keys[j]] && keys[i] < keys[j]
	})
	for _, k := range keys {
		fmt.Fprintf(w, "  %7d  %s\n", rep.touched[k], k)
	}
	for who, n := range rep.excused {
		fmt.Fprintf(w, "  provoked on purpose: %d requests of %s\n", n, who)
	}
	for k, n := range rep.graphLag {
		fmt.Fprintf(w, "  refused before the Node authorizer knew the pod, granted within %s: %d × %s\n", graphLag, n, k)
	}
}

// checkLeastPrivilege is the final check; it returns what failed, and
// writes its report to w.
func checkLeastPrivilege(ctx context.Context, w io.Writer) error {
	var errs []error
	if err := checkAuthorizationFlags(); err != nil {
		errs = append(errs, err)
	}
	if err := probeNodeRestriction(ctx); err != nil {
		errs = append(errs, err)
	} else {
		fmt.Fprintf(w, "least privilege: system:node:%s was refused reading and patching node %s (Node authorizer, NodeRestriction)\n", privilegeProbe, env.sentinel.name)
	}
	n, err := checkNodeCSRs(ctx)
	if err != nil {
		errs = append(errs, err)
	} else {
		fmt.Fprintf(w, "least privilege: %d CSRs by node identities, each for its own identity\n", n)
	}
	records, err := readAuditFile(env.cp.AuditLog)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	rep := auditNodeRequests(records)
	rep.write(w)
	if len(rep.offences) > 0 {
		list := rep.offences
		if len(list) > 50 {
			list = append(slices.Clone(list[:50]), fmt.Sprintf("… and %d more", len(list)-50))
		}
		errs = append(errs, fmt.Errorf("%d requests by node identities outside their privilege or refused (audit log %s):\n  %s",
			len(rep.offences), env.cp.AuditLog, strings.Join(list, "\n  ")))
	}
	return errors.Join(errs...)
}

// checkAuthorizationFlags reads the running apiserver's command line: the
// Node authorizer before RBAC, NodeRestriction admission.
func checkAuthorizationFlags() error {
	args, err := env.cp.ServerArgs("kube-apiserver")
	if err != nil {
		return err
	}
	flag := func(name string) []string {
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
				return strings.Split(v, ",")
			}
		}
		return nil
	}
	var errs []error
	if modes := flag("authorization-mode"); !slices.Equal(modes, []string{"Node", "RBAC"}) {
		errs = append(errs, fmt.Errorf("kube-apiserver runs with --authorization-mode=%s, want Node,RBAC", strings.Join(modes, ",")))
	}
	if !slices.Contains(flag("enable-admission-plugins"), "NodeRestriction") {
		errs = append(errs, fmt.Errorf("kube-apiserver runs without NodeRestriction admission (--enable-admission-plugins=%s)", strings.Join(flag("enable-admission-plugins"), ",")))
	}
	return errors.Join(errs...)
}

// probeNodeRestriction proves the flags in effect: a node identity may
// neither read another node (the Node authorizer) nor patch it
// (NodeRestriction; the authorizer lets node writes through to it).
func probeNodeRestriction(ctx context.Context) error {
	client, err := nodeClient(privilegeProbe)
	if err != nil {
		return err
	}
	victim := env.sentinel.name
	_, err = client.CoreV1().Nodes().Get(ctx, victim, metav1.GetOptions{})
	if !apierrors.IsForbidden(err) {
		return fmt.Errorf("node identity %s reading node %s: got %v, want forbidden (is the Node authorizer on?)", privilegeProbe, victim, err)
	}
	patch := []byte(`{"metadata":{"labels":{"nodekit-e2e-privilege-probe":"must-be-refused"}}}`)
	_, err = client.CoreV1().Nodes().Patch(ctx, victim, types.MergePatchType, patch, metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) {
		return fmt.Errorf("node identity %s patching node %s: got %v, want forbidden (is NodeRestriction on?)", privilegeProbe, victim, err)
	}
	return nil
}

// nodeClient is a client authenticated as system:node:<name>.
func nodeClient(name string) (kubernetes.Interface, error) {
	dir, err := os.MkdirTemp(env.dir, "creds-"+name+"-")
	if err != nil {
		return nil, err
	}
	path, err := env.cp.NodeCredentials(name, dir)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// checkNodeCSRs checks that every CSR a node identity created asks for a
// certificate of that identity, and returns how many there are.
func checkNodeCSRs(ctx context.Context) (int, error) {
	list, err := env.cp.Client().CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("list CSRs: %w", err)
	}
	n := 0
	var errs []error
	for _, csr := range list.Items {
		if !strings.HasPrefix(csr.Spec.Username, "system:node:") {
			continue
		}
		n++
		block, _ := pem.Decode(csr.Spec.Request)
		if block == nil {
			errs = append(errs, fmt.Errorf("CSR %s by %s holds no PEM request", csr.Name, csr.Spec.Username))
			continue
		}
		req, err := x509.ParseCertificateRequest(block.Bytes)
		if err != nil {
			errs = append(errs, fmt.Errorf("CSR %s by %s: %w", csr.Name, csr.Spec.Username, err))
			continue
		}
		if req.Subject.CommonName != csr.Spec.Username || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) {
			errs = append(errs, fmt.Errorf("CSR %s by %s asks for CN=%s O=%v, want its own identity", csr.Name, csr.Spec.Username, req.Subject.CommonName, req.Subject.Organization))
		}
	}
	return n, errors.Join(errs...)
}
