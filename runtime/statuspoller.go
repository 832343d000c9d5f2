package runtime

import (
	"context"
	"errors"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/internal/timers"
	"github.com/nodekit/nodekit/ticks"
)

// Defaults of the StatusPoller, the kubelet's.
const (
	// DefaultStatusPeriod is how often the runtime's status is asked (the
	// kubelet's updateRuntimeUp period).
	DefaultStatusPeriod = 5 * time.Second
	// DefaultImagesPeriod is how often the runtime's images are listed
	// for the node's status.images: the period of the kubelet's image
	// cache (ImageGCManager's ListImages loop), which its node status
	// reads.
	DefaultImagesPeriod = 30 * time.Second
	// DefaultDownThreshold is how long the runtime may go without a
	// Status answer before it counts as down (the kubelet's
	// maxWaitForContainerRuntime).
	DefaultDownThreshold = 30 * time.Second
)

// errNotAsked is the runtime error before the first Status answer.
var errNotAsked = errors.New("container runtime status check may not have completed yet")

// StatusPoller asks the runtime for its status, version and images in the
// background and answers the node status setters from what it last heard,
// so no setter ever blocks on the runtime: a runtime that hangs turns the
// node NotReady ("container runtime is down") once DownThreshold passes
// without an answer, while the node status and the Lease keep flowing, as
// the kubelet's runtime state. Its methods are safe for concurrent use and
// never block on the runtime.
type StatusPoller struct {
	client *Client
	clock  clock.Clock
	opts   StatusPollerOptions

	changes chan struct{} // Changes; one slot
	poke    chan struct{} // pollStatus → watchHealth: Health's answer changed; one slot

	mu          sync.Mutex
	health      Health
	lastHealthy time.Time // when a Status call last answered
	name, ver   string
	verErr      error
	images      []*runtimeapi.Image
	imagesErr   error
}

// StatusPollerOptions configures a StatusPoller; zero fields take the
// defaults.
type StatusPollerOptions struct {
	StatusPeriod, ImagesPeriod, DownThreshold time.Duration
	// Timeout, when set, bounds each CRI call below the Client's own
	// request timeout (Options.ConnectionTimeout, the kubelet's
	// runtimeRequestTimeout, 2 minutes by default), which bounds them
	// otherwise, as the kubelet's. A shorter one turns a runtime that is
	// only slow under load into a runtime that is down.
	Timeout time.Duration
	Clock   clock.Clock
	// Align moves the Status and ListImages rounds to the node's shared
	// ticks (package ticks; nil waits each period exactly).
	Align ticks.Align
}

// NewStatusPoller returns a poller of client. It does no I/O until Run.
func NewStatusPoller(client *Client, opts StatusPollerOptions) *StatusPoller {
	if opts.StatusPeriod <= 0 {
		opts.StatusPeriod = DefaultStatusPeriod
	}
	if opts.ImagesPeriod <= 0 {
		opts.ImagesPeriod = DefaultImagesPeriod
	}
	if opts.DownThreshold <= 0 {
		opts.DownThreshold = DefaultDownThreshold
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &StatusPoller{
		client: client, clock: opts.Clock, opts: opts,
		changes: make(chan struct{}, 1), poke: make(chan struct{}, 1),
		verErr: errNotAsked,
	}
}

// Changes receives a value when what Health answers changes after the
// runtime's first answer: a Status answer that differs from the last (the
// runtime or its network turned ready or not), DownThreshold passing
// without an answer (a hung runtime is "down" from then on), and the first
// answer after that. Changes that come while a value waits are one value.
// The agent kicks a node status cycle with it (status.Reporter.SyncNow), so
// the node's Ready condition follows the runtime at once rather than at the
// next status period: a frozen runtime turns the node NotReady DownThreshold
// after its last answer. The runtime's first answer is not a change: a
// restarted agent's startup hold decides when the node's status is first
// written. The channel is never closed.
func (p *StatusPoller) Changes() <-chan struct{} { return p.changes }

// Run polls until ctx is done: Status (and, until it succeeds, Version)
// every StatusPeriod, ListImages every ImagesPeriod. It blocks and returns
// nil.
func (p *StatusPoller) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { p.every(ctx, p.opts.StatusPeriod, p.pollStatus) })
	wg.Go(func() { p.every(ctx, p.opts.ImagesPeriod, p.pollImages) })
	// In Run's own goroutine: one goroutine fewer per agent.
	p.watchHealth(ctx)
	return nil
}

func (p *StatusPoller) every(ctx context.Context, period time.Duration, poll func(context.Context)) {
	t := p.clock.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			if p.opts.Timeout > 0 {
				callCtx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
				poll(callCtx)
				cancel()
			} else {
				poll(ctx)
			}
			t.Reset(p.opts.Align.Wait(period))
		}
	}
}

func (p *StatusPoller) pollStatus(ctx context.Context) {
	h := p.client.Health(ctx)
	answered := p.clock.Now()
	p.mu.Lock()
	needVersion := p.verErr != nil
	p.mu.Unlock()
	var name, ver string
	var verErr error
	if needVersion {
		name, ver, verErr = p.client.Version(ctx)
	}
	// The health and the version are published together: a node status
	// computed in between would show a Ready runtime of version
	// "Unknown://Unknown".
	p.mu.Lock()
	if needVersion {
		p.name, p.ver, p.verErr = name, ver, verErr
	}
	now := p.clock.Now()
	before, _ := p.healthKeyLocked(now)
	// A call that got no answer changes nothing: the last answer stands
	// until DownThreshold passes, as the kubelet's runtime state.
	if !errors.Is(h.RuntimeErr, errRuntimeUnreachable) {
		p.health, p.lastHealthy = h, answered
	}
	after, _ := p.healthKeyLocked(now)
	p.mu.Unlock()
	if after != before {
		signal(p.poke)
	}
	if h.RuntimeErr != nil && ctx.Err() == nil {
		klog.FromContext(ctx).V(2).Info("Container runtime is not ready", "err", h.RuntimeErr)
	}
}

// watchHealth sends on changes what Changes documents. It wakes when
// pollStatus saw Health's answer change, and DownThreshold after the last
// answer (while answers come every StatusPeriod that is once per
// DownThreshold, to look again).
func (p *StatusPoller) watchHealth(ctx context.Context) {
	var t clock.Timer
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	var last string
	seen := false
	for {
		p.mu.Lock()
		// The health and the time it turns down by DownThreshold are
		// taken from one reading: a later one could see that time
		// passed, with no change signalled for it.
		now := p.clock.Now()
		key, answered := p.healthKeyLocked(now)
		downAt := p.lastHealthy.Add(p.opts.DownThreshold)
		p.mu.Unlock()
		var wake <-chan time.Time
		if answered {
			if seen && key != last {
				signal(p.changes)
			}
			last, seen = key, true
			// Health counts the runtime down once more than
			// DownThreshold has passed: look just after.
			if !now.After(downAt) {
				var due bool
				if t, due = timers.Arm(p.clock, t, downAt.Add(time.Millisecond), time.Millisecond); due {
					continue
				}
				wake = t.C()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-p.poke:
		case <-wake:
		}
	}
}

// signal sends on ch, a channel of one slot, unless a value waits there.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (p *StatusPoller) pollImages(ctx context.Context) {
	images, err := p.client.ImageService().ListImages(ctx, nil)
	p.mu.Lock()
	p.images, p.imagesErr = images, err
	p.mu.Unlock()
}

// Version returns the runtime's name and version as last heard
// (status.RuntimeVersionFunc).
func (p *StatusPoller) Version(context.Context) (string, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.name, p.ver, p.verErr
}

// Health returns the runtime and network errors for the Ready condition
// (status.RuntimeHealthFunc): the last Status answer's, "container runtime
// is down" when the runtime has not answered for DownThreshold, and
// "container runtime status check may not have completed yet" before its
// first answer, as the kubelet's.
func (p *StatusPoller) Health(context.Context) (runtimeErr, networkErr error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.healthLocked(p.clock.Now())
}

// healthLocked is what Health answers at now.
func (p *StatusPoller) healthLocked(now time.Time) (runtimeErr, networkErr error) {
	switch {
	case p.lastHealthy.IsZero():
		return errNotAsked, nil
	case now.Sub(p.lastHealthy) > p.opts.DownThreshold:
		return errRuntimeUnreachable, nil
	}
	return p.health.RuntimeErr, p.health.NetworkErr
}

// healthKeyLocked is what Health answers, comparable; answered is false
// before the runtime's first answer.
func (p *StatusPoller) healthKeyLocked(now time.Time) (key string, answered bool) {
	runtimeErr, networkErr := p.healthLocked(now)
	text := func(err error) string {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	return text(runtimeErr) + "\x00" + text(networkErr), !p.lastHealthy.IsZero()
}

// Handlers returns the runtime handlers as last heard
// (status.RuntimeHandlersFunc), with the runtime's error when it is not
// ready. Before the runtime's first answer it returns none and no error,
// as the kubelet's runtime state: nothing has failed yet (the Ready
// condition says the status check may not have completed), and an error
// would be an error line at every healthy start.
func (p *StatusPoller) Handlers(context.Context) ([]*runtimeapi.RuntimeHandler, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.health.Handlers, p.health.RuntimeErr
}

// Features returns the runtime's features as last heard
// (status.RuntimeFeaturesFunc), with the runtime's error when it is not
// ready; before the runtime's first answer none and no error, as Handlers.
func (p *StatusPoller) Features(context.Context) (*runtimeapi.RuntimeFeatures, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.health.Features, p.health.RuntimeErr
}

// Images returns the runtime's images as last listed
// (status.ListImagesFunc), or the last listing's error; before the first
// listing none and no error, as the kubelet's image cache. The images are
// shared: callers must not modify them.
func (p *StatusPoller) Images(context.Context) ([]*runtimeapi.Image, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.images, p.imagesErr
}
