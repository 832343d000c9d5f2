package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"
)

// auditRecord is the part of an audit.k8s.io/v1 Event the reliability and
// security checks read: who did what to which object, when, with what
// result.
type auditRecord struct {
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	User       struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"user"`
	ObjectRef      *auditObjectRef `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	RequestReceived time.Time `json:"requestReceivedTimestamp"`
	Code            int       `json:"-"`
}

// String names the request: "verb resource[/subresource] namespace/name
// → code at time".
func (r auditRecord) String() string {
	what := r.RequestURI
	if o := r.ObjectRef; o != nil {
		what = o.Resource
		if o.APIGroup != "" {
			what += "." + o.APIGroup
		}
		if o.Subresource != "" {
			what += "/" + o.Subresource
		}
		what += " " + o.Namespace + "/" + o.Name
	}
	return fmt.Sprintf("%s %s → %d at %s", r.Verb, what, r.Code, r.RequestReceived.Format("15:04:05.000"))
}

// auditObjectRef is the object an audited request is for.
type auditObjectRef struct {
	Resource    string `json:"resource"`
	APIGroup    string `json:"apiGroup"`
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	Subresource string `json:"subresource"`
}

// readAuditFile returns the completed requests of an audit log.
func readAuditFile(path string) ([]auditRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var records []auditRecord
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 16<<20)
	for s.Scan() {
		var r auditRecord
		if err := json.Unmarshal(s.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("audit log %s: %w", path, err)
		}
		if r.Stage != "ResponseComplete" || r.ResponseStatus == nil {
			continue
		}
		r.Code = r.ResponseStatus.Code
		records = append(records, r)
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	return records, nil
}

// readAuditRecords returns the completed requests in the apiserver's audit
// log so far.
func readAuditRecords(t *testing.T) []auditRecord {
	t.Helper()
	records, err := readAuditFile(env.cp.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	return records
}
