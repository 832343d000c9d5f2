package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// Requests counts API requests by "verb resource[/subresource]", for
// example "update leases" or "patch nodes/status".
type Requests map[string]int

// auditEvent holds the fields of a kube-apiserver audit event (audit.k8s.io/v1,
// JSON lines) that CountRequests reads.
type auditEvent struct {
	AuditID string `json:"auditID"`
	Verb    string `json:"verb"`
	User    struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
	} `json:"objectRef"`
	RequestURI               string    `json:"requestURI"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
}

// CountRequests reads a kube-apiserver audit log and counts the requests
// user made that the apiserver received in [from, to). A request logged at
// several stages (a watch: ResponseStarted, then ResponseComplete) counts
// once. The audit policy must log the user's requests (the e2e control
// plane logs every request of the system:nodes group).
func CountRequests(path, user string, from, to time.Time) (Requests, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("count requests of %s: %w", user, err)
	}
	defer f.Close()
	counts := Requests{}
	seen := map[string]bool{}
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for line := 1; s.Scan(); line++ {
		// Cheap filter before decoding: most lines are other users'.
		if !strings.Contains(s.Text(), `"`+user+`"`) {
			continue
		}
		var ev auditEvent
		if err := json.Unmarshal(s.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("count requests of %s: %s line %d: %w", user, path, line, err)
		}
		if ev.User.Username != user || seen[ev.AuditID] ||
			ev.RequestReceivedTimestamp.Before(from) || !ev.RequestReceivedTimestamp.Before(to) {
			continue
		}
		seen[ev.AuditID] = true
		counts[requestKey(ev)]++
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("count requests of %s: read %s: %w", user, path, err)
	}
	return counts, nil
}

func requestKey(ev auditEvent) string {
	if ev.ObjectRef == nil {
		return ev.Verb + " " + ev.RequestURI
	}
	res := ev.ObjectRef.Resource
	if ev.ObjectRef.Subresource != "" {
		res += "/" + ev.ObjectRef.Subresource
	}
	return ev.Verb + " " + res
}

// Total is the number of requests.
func (r Requests) Total() int {
	n := 0
	for _, c := range r {
		n += c
	}
	return n
}

// String lists the counts, largest first: "update leases: 6, get nodes: 1".
func (r Requests) String() string {
	if len(r) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(r))
	for k := range r {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if r[keys[i]] != r[keys[j]] {
			return r[keys[i]] > r[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, r[k])
	}
	return strings.Join(parts, ", ")
}
