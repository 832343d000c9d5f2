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
// JSON lines) that ReadRequests reads.
type auditEvent struct {
	AuditID string `json:"auditID"`
	Stage   string `json:"stage"`
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
	StageTimestamp           time.Time `json:"stageTimestamp"`
}

// Request is one request of an audit log as the apiserver saw it.
type Request struct {
	// Key is "verb resource[/subresource]", as Requests counts them.
	Key string
	// Received is when the apiserver received the request, before
	// authentication and its priority and fairness queue; Answered when
	// it had sent the whole response (the ResponseComplete stage).
	Received, Answered time.Time
}

// ReadRequests reads a kube-apiserver audit log once for the requests
// user made that the apiserver received in [from, to). It counts them
// (counts; a request logged at several stages, a watch's ResponseStarted
// then ResponseComplete, counts once) and returns those it answered (a
// watch still open is not), in the order received, with the apiserver's
// own times. The audit policy must log the user's requests at their
// ResponseComplete stage (the e2e control plane logs every request of the
// system:nodes group).
func ReadRequests(path, user string, from, to time.Time) (counts Requests, answered []Request, err error) {
	counts = Requests{}
	seen := map[string]bool{}
	err = readAudit(path, user, from, to, func(ev *auditEvent) {
		key := requestKey(*ev)
		if !seen[ev.AuditID] {
			seen[ev.AuditID] = true
			counts[key]++
		}
		if ev.Stage == "ResponseComplete" {
			answered = append(answered, Request{Key: key, Received: ev.RequestReceivedTimestamp, Answered: ev.StageTimestamp})
		}
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read requests of %s: %w", user, err)
	}
	sort.SliceStable(answered, func(i, j int) bool { return answered[i].Received.Before(answered[j].Received) })
	return counts, answered, nil
}

// UnderWay summarizes the requests with key (say "patch pods/status")
// among reqs: how long the apiserver took for each (received → answered),
// and the other requests it received while at least one of them was under
// way, counted by key.
func UnderWay(reqs []Request, key string) (times []time.Duration, meanwhile Requests) {
	var spans []Request
	for _, r := range reqs {
		if r.Key == key {
			spans = append(spans, r)
			times = append(times, r.Answered.Sub(r.Received))
		}
	}
	meanwhile = Requests{}
	for _, r := range reqs {
		if r.Key == key {
			continue
		}
		for _, s := range spans {
			if !r.Received.Before(s.Received) && r.Received.Before(s.Answered) {
				meanwhile[r.Key]++
				break
			}
		}
	}
	return times, meanwhile
}

// readAudit calls fn with each event of the audit log at path of a request
// user made that the apiserver received in [from, to), at every stage it
// was logged at.
func readAudit(path, user string, from, to time.Time, fn func(*auditEvent)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for line := 1; s.Scan(); line++ {
		// Cheap filter before decoding: most lines are other users'.
		if !strings.Contains(s.Text(), `"`+user+`"`) {
			continue
		}
		var ev auditEvent
		if err := json.Unmarshal(s.Bytes(), &ev); err != nil {
			return fmt.Errorf("%s line %d: %w", path, line, err)
		}
		if ev.User.Username != user || ev.RequestReceivedTimestamp.Before(from) || !ev.RequestReceivedTimestamp.Before(to) {
			continue
		}
		fn(&ev)
	}
	if err := s.Err(); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
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
