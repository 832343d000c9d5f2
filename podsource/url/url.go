package url

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podsource/manifest"
)

const (
	// DefaultCheckFrequency is how often the URL is fetched, the kubelet's
	// httpCheckFrequency default.
	DefaultCheckFrequency = 20 * time.Second
	// DefaultTimeout bounds one fetch, as the kubelet's HTTP client.
	DefaultTimeout = 10 * time.Second
)

// Options configures a Source.
type Options struct {
	// URL serves the manifest (the kubelet's staticPodURL); required,
	// http or https. Logs and events show it without its query and
	// password.
	URL string
	// Header is sent with every request (staticPodURLHeader).
	Header http.Header
	// NodeName is the node the pods run on; required.
	NodeName string
	// CheckFrequency is how often the URL is fetched; default 20 s.
	CheckFrequency time.Duration
	// Client fetches the URL; default an http.Client with a 10 s timeout,
	// as the kubelet's.
	Client *http.Client
	// Strict makes unknown and duplicate fields errors; by default they are
	// ignored with a warning, as the kubelet ignores them.
	Strict bool
	// Recorder, when set, receives a Warning event on the node for every
	// manifest problem (see manifest.Reporter).
	Recorder record.EventRecorder
	// NodeRef returns the object the events are recorded against, at each
	// event; default the node's reference without its UID
	// (manifest.NodeReference). The agent gives the node's UID once it is
	// known, as the kubelet does. It must not block.
	NodeRef func() *v1.ObjectReference
	// Clock paces the fetches; default clock.RealClock{}.
	Clock clock.Clock
}

// Source is the kubelet's "http" pod source: static pods from a manifest
// URL. Create it with New; a podsource.Config runs it.
type Source struct {
	url string
	// location is the URL as logs and events show it: without query and
	// with the password masked, as either may carry a credential.
	location string
	header   http.Header
	period   time.Duration
	client   *http.Client
	clock    clock.Clock
	decoder  *manifest.Decoder
	reporter *manifest.Reporter

	// The fields below belong to Run's goroutine.

	// body is the last body fetched, and problem what was wrong with it
	// (nil when nothing).
	body    []byte
	problem *report
	// sent is the last snapshot sent; nil before the first.
	sent []*v1.Pod
}

type report struct {
	reason string
	err    error
}

var _ podsource.Source = (*Source)(nil)

// New validates opts and returns a Source. It makes no request.
func New(opts Options) (*Source, error) {
	u, err := neturl.Parse(opts.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("podsource/url: Options.URL %q is not an http or https URL", opts.URL)
	}
	switch {
	case opts.CheckFrequency < 0:
		return nil, fmt.Errorf("podsource/url: CheckFrequency %v must not be negative", opts.CheckFrequency)
	case opts.CheckFrequency == 0:
		opts.CheckFrequency = DefaultCheckFrequency
	}
	dec, err := manifest.NewDecoder(manifest.Options{NodeName: opts.NodeName, Source: podsource.HTTPSource, Strict: opts.Strict})
	if err != nil {
		return nil, fmt.Errorf("podsource/url: %w", err)
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: DefaultTimeout}
	}
	if opts.NodeRef == nil {
		ref := manifest.NodeReference(opts.NodeName)
		opts.NodeRef = func() *v1.ObjectReference { return ref }
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	shown := *u
	shown.RawQuery, shown.ForceQuery, shown.Fragment, shown.RawFragment = "", false, "", ""
	return &Source{
		url:      opts.URL,
		location: shown.Redacted(),
		header:   opts.Header.Clone(),
		period:   opts.CheckFrequency,
		client:   opts.Client,
		clock:    opts.Clock,
		decoder:  dec,
		reporter: manifest.NewReporter(opts.Recorder, opts.NodeRef),
	}, nil
}

// Name returns podsource.HTTPSource ("http").
func (s *Source) Name() string { return podsource.HTTPSource }

// Run fetches the URL at once and then every CheckFrequency, and sends the
// complete set of pods on out when it changed. The body is a Pod or a
// PodList in YAML or JSON, at most 10 MiB. A body equal to the last one
// changes nothing. An empty body means no pods. A failed fetch (network
// error, a status other than 200 OK, a body too large) or a body that
// cannot be decoded is reported (see manifest.Reporter) and leaves the pods
// as last sent; until a first usable body, nothing is sent, so the Config
// is not AllReady, as with the kubelet. An item of a PodList that cannot
// be used is reported and, if a pod of its name was sent before, keeps that
// pod; the other items are used. Run returns nil when ctx is done; it may
// be called once.
func (s *Source) Run(ctx context.Context, out chan<- []*v1.Pod) error {
	logger := klog.FromContext(ctx).WithValues("url", s.location)
	ctx = klog.NewContext(ctx, logger)
	logger.V(1).Info("Watching static pod manifest URL", "checkFrequency", s.period)
	timer := s.clock.NewTimer(s.period)
	defer timer.Stop()
	for {
		if pods, ok := s.poll(ctx); ok && (s.sent == nil || !samePods(s.sent, pods)) {
			select {
			case out <- pods:
				s.sent = pods
			case <-ctx.Done():
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C():
			timer.Reset(s.period)
		}
	}
}

// poll fetches the URL and returns the pods it now describes; false when
// nothing is to be sent.
func (s *Source) poll(ctx context.Context) ([]*v1.Pod, bool) {
	body, err := s.fetch(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.reporter.Report(ctx, s.location, manifest.ReasonUnavailable, err)
		}
		return nil, false
	}
	if s.sent != nil && bytes.Equal(body, s.body) {
		// Unchanged: what was wrong with it still is; a fetch error
		// reported meanwhile is over.
		s.report(ctx, s.problem)
		return nil, false
	}
	s.body = body
	if len(body) == 0 {
		s.problem = &report{manifest.ReasonWarning, errors.New("the response is empty: no static pods")}
		s.report(ctx, s.problem)
		return []*v1.Pod{}, true
	}
	res, err := s.decoder.Pods(body, s.url)
	if err != nil {
		s.problem = &report{manifest.ReasonInvalid, err}
		s.report(ctx, s.problem)
		return nil, false
	}
	pods, problem := s.assemble(res)
	s.problem = problem
	s.report(ctx, problem)
	return pods, true
}

// assemble makes the snapshot from a decoded body: its valid pods without
// duplicates, plus the last sent pod of every invalid item with a name.
func (s *Source) assemble(res *manifest.Result) ([]*v1.Pod, *report) {
	previous := make(map[types.NamespacedName]*v1.Pod, len(s.sent))
	for _, p := range s.sent {
		previous[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = p
	}
	var problems []string
	pods := make([]*v1.Pod, 0, len(res.Pods)+len(res.Invalid))
	names := make(map[types.NamespacedName]bool, len(res.Pods))
	uids := make(map[types.UID]bool, len(res.Pods))
	add := func(p *v1.Pod) {
		name := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
		switch {
		case names[name]:
			problems = append(problems, fmt.Sprintf("pod %s appears twice, ignoring all but the first", name))
		case uids[p.UID]:
			problems = append(problems, fmt.Sprintf("pod %s has the UID %s of another pod, ignoring it", name, p.UID))
		default:
			names[name], uids[p.UID] = true, true
			pods = append(pods, p)
		}
	}
	for _, p := range res.Pods {
		add(p)
	}
	for _, item := range res.Invalid {
		msg := item.Err.Error()
		key := types.NamespacedName{Namespace: item.Namespace, Name: item.Name}
		if p, ok := previous[key]; ok && item.Name != "" && !names[key] {
			add(p)
			msg += " (the pod keeps running as last read)"
		}
		problems = append(problems, msg)
	}
	switch {
	case len(problems) > 0:
		return pods, &report{manifest.ReasonInvalid, errors.New(strings.Join(append(problems, res.Warnings...), "; "))}
	case len(res.Warnings) > 0:
		return pods, &report{manifest.ReasonWarning, errors.New(strings.Join(res.Warnings, "; "))}
	default:
		return pods, nil
	}
}

func (s *Source) report(ctx context.Context, r *report) {
	if r == nil {
		s.reporter.Clear(ctx, s.location)
		return
	}
	s.reporter.Report(ctx, s.location, r.reason, r.err)
}

// fetch GETs the URL and returns the body of a 200 OK response.
func (s *Source) fetch(ctx context.Context) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header = s.header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	resp, err := s.client.Do(req)
	if err != nil {
		// The client's error quotes the whole URL: say it without the
		// parts that may be credentials.
		var ue *neturl.Error
		if errors.As(err, &ue) {
			return nil, fmt.Errorf("%s %s: %w", ue.Op, s.location, ue.Err)
		}
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, manifest.MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("read the response: %w", err)
	}
	if len(data) > manifest.MaxSize {
		return nil, fmt.Errorf("the response is larger than %d bytes", manifest.MaxSize)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %s", resp.Status)
	}
	return data, nil
}

// samePods reports whether two snapshots hold the same pod objects in the
// same order.
func samePods(a, b []*v1.Pod) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
