package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestAuditNodeRequests: the least-privilege classification. A refusal of
// an object the same node is granted moments later is the Node
// authorizer's graph lag, not an offence; one never granted is; a test's
// kubectl with a node's credentials is excused only inside its window; the
// agent's own request outside its scope never is.
func TestAuditNodeRequests(t *testing.T) {
	end := excuseDenials("n-kubectl", "a test's kubectl")
	at := time.Now() // inside the window just opened
	rec := func(user, ua, verb, resource, ns, name string, code int, off time.Duration) auditRecord {
		var r auditRecord
		r.User.Username = "system:node:" + user
		r.UserAgent, r.Verb, r.Code = ua, verb, code
		r.RequestURI = "/api/v1/namespaces/" + ns + "/" + resource + "?fieldSelector=metadata.name%3D" + name
		r.ObjectRef = &auditObjectRef{Resource: resource, Namespace: ns, Name: name}
		r.RequestReceived = at.Add(off)
		return r
	}
	records := []auditRecord{
		rec("n-lag", "nodekit/v0", "watch", "configmaps", "ns", "cfg", 403, 0),
		rec("n-lag", "nodekit/v0", "list", "configmaps", "ns", "cfg", 200, 40*time.Millisecond),
		rec("n-refused", "nodekit/v0", "watch", "secrets", "ns", "s", 403, 0),
		rec("n-refused", "nodekit/v0", "list", "secrets", "ns", "s", 200, time.Minute),
		rec("n-kubectl", "kubectl/v1.37.2", "create", "selfsubjectreviews", "", "", 201, 0),
		rec("n-kubectl", "nodekit/v0", "create", "selfsubjectreviews", "", "", 201, 0),
	}
	end()
	rep := auditNodeRequests(records)
	if rep.graphLag["watch configmaps"] != 1 {
		t.Errorf("graph lag = %v, want the refused watch of cfg granted 40 ms later", rep.graphLag)
	}
	if len(rep.offences) != 2 || !strings.Contains(rep.offences[0], "n-refused") || !strings.Contains(rep.offences[1], "n-kubectl") {
		t.Errorf("offences = %q, want the secret never granted within %s and the agent's own selfsubjectreview", rep.offences, graphLag)
	}
	if n := rep.excused["n-kubectl (a test's kubectl)"]; n != 1 {
		t.Errorf("excused = %v, want the test's kubectl request", rep.excused)
	}
}
