package runtime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nodekit/nodekit/podstate"

	"github.com/distribution/reference"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	cri "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"
)

// imageManager makes sure containers' images are present, with the
// kubelet's pull policies, credentials, back-off and events.
type imageManager struct {
	is       cri.ImageManagerService
	pulls    ImagePullManager // nil: present images are used by any pod
	recorder record.EventRecorder
	backOff  *flowcontrol.Backoff
	clock    clock.Clock
	limiter  flowcontrol.RateLimiter // nil: no limit
	tokens   chan struct{}           // nil: any number of pulls at once

	mu       sync.Mutex
	failures map[string]pullFailure // by back-off key
	// pullTime is, by pod, the time its successful pulls took, waiting
	// for a turn included.
	pullTime map[types.UID]time.Duration
}

// ImagePullManager keeps the records of which credentials pulled each
// image and tells whether a pod may use an image present on the node
// (the kubelet's ImagePullManager; imagepull.Manager is one). image is
// the container's image field as written, imageRef the runtime's image
// ID. The image manager calls RecordPullIntent before each pull (a pull
// it cannot record does not happen) and then exactly one of
// RecordImagePulled, with the credentials that worked
// (NodePodsAccessible for a pull without credentials), or
// RecordImagePullFailed. Before it uses a present image (pull policies
// IfNotPresent and Never) it asks MustAttemptImagePull, which calls
// podCredentials at most once when the answer depends on the pod's
// credentials for the image: its pull secrets that hold some for the
// image's registry, and no service account (nodekit has no credential
// providers). The methods must be safe for concurrent use.
type ImagePullManager interface {
	RecordPullIntent(ctx context.Context, image string) error
	RecordImagePulled(ctx context.Context, image, imageRef string, creds *kubeletconfig.ImagePullCredentials)
	RecordImagePullFailed(ctx context.Context, image string)
	MustAttemptImagePull(ctx context.Context, image, imageRef string,
		podCredentials func() ([]kubeletconfig.ImagePullSecret, *kubeletconfig.ImagePullServiceAccount, error)) (bool, error)
}

// pullFailure is the last failed pull of an image for a pod.
type pullFailure struct {
	msg string
	at  time.Time
}

func newImageManager(is cri.ImageManagerService, pulls ImagePullManager, recorder record.EventRecorder, backOff *flowcontrol.Backoff, clk clock.Clock, parallel int, qps float32, burst int) *imageManager {
	im := &imageManager{is: is, pulls: pulls, recorder: recorder, backOff: backOff, clock: clk, failures: map[string]pullFailure{}, pullTime: map[types.UID]time.Duration{}}
	switch {
	case parallel >= 0 && parallel <= 1:
		im.tokens = make(chan struct{}, 1)
	case parallel > 1:
		im.tokens = make(chan struct{}, parallel)
	}
	if qps > 0 {
		im.limiter = flowcontrol.NewTokenBucketRateLimiterWithClock(qps, max(burst, 1), clk)
	}
	return im
}

// imageResult is an image made present, or why not.
type imageResult struct {
	ref  string // the image ID to create the container from
	user imageUser
	// err is nil or one of ErrInvalidImageName, ErrImageInspect,
	// ErrImageNeverPull, ErrImagePull, ErrImagePullBackOff; msg details it.
	err     error
	msg     string
	retryAt time.Time // when the pull back-off ends
}

// defaultTag appends ":latest" to an image without tag or digest.
func defaultTag(image string) (string, reference.Named, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", nil, err
	}
	_, tagged := named.(reference.Tagged)
	_, digested := named.(reference.Digested)
	if !tagged && !digested {
		return image + ":latest", named, nil
	}
	return image, named, nil
}

// pullPolicy returns userImage with the default tag applied (defaultTag)
// and the pull policy ensure applies to it: policy, or when empty Always
// for an image tagged latest (or untagged) and not pinned by digest,
// IfNotPresent otherwise, as the API server's defaulting.
func pullPolicy(userImage string, policy v1.PullPolicy) (string, reference.Named, v1.PullPolicy, error) {
	image, named, err := defaultTag(userImage)
	if err != nil || policy != "" {
		return image, named, policy, err
	}
	if _, digested := named.(reference.Digested); !digested && (image == userImage+":latest" || hasLatestTag(named)) {
		return image, named, v1.PullAlways, nil
	}
	return image, named, v1.PullIfNotPresent, nil
}

// imageLookups are the ImageStatus calls a sync makes ahead of ensure, by
// the container's image as written, while it creates the pod's sandbox: a
// round trip to the runtime less on the way to the pod's first container.
// nil holds none.
type imageLookups map[string]*imageLookup

// imageLookup is an image as ensure inspects it: the image as written with
// its pull policy as written (asked), pullPolicy's answer for them (image,
// named, policy) and the ImageStatus request (spec). When started ahead,
// resp and err are the runtime's answer once done is closed.
type imageLookup struct {
	asked  v1.PullPolicy
	image  string
	named  reference.Named
	policy v1.PullPolicy
	spec   *runtimeapi.ImageSpec
	done   chan struct{}
	resp   *runtimeapi.ImageStatusResponse
	err    error
}

// lookup returns the lookup of userImage with policy for pod: the one
// started ahead when there is one, else a new one.
func lookup(pod *v1.Pod, userImage string, policy v1.PullPolicy, ahead imageLookups) (*imageLookup, error) {
	if l := ahead[userImage]; l != nil && l.asked == policy {
		return l, nil
	}
	image, named, resolved, err := pullPolicy(userImage, policy)
	if err != nil {
		return nil, err
	}
	return &imageLookup{asked: policy, image: image, named: named, policy: resolved,
		spec: &runtimeapi.ImageSpec{Image: image, Annotations: pod.Annotations}}, nil
}

// status is the runtime's ImageStatus of the image: the answer to the
// call started ahead, else a call now.
func (l *imageLookup) status(ctx context.Context, is cri.ImageManagerService) (*runtimeapi.ImageStatusResponse, error) {
	if l.done == nil {
		return is.ImageStatus(ctx, l.spec, false)
	}
	select {
	case <-l.done:
		return l.resp, l.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// lookAhead starts, on ctx, the ImageStatus call ensure makes for each
// distinct image of containers whose pull policy is not Always, and
// returns them for ensure. It does not block. What ensure does with the
// answer (events, pulls, the ImagePullManager's verdict) happens in ensure,
// in the kubelet's order; only the question is asked earlier, so an image
// removed in between is found missing by CreateContainer instead of by
// ImageStatus, as one removed after ImageStatus always was.
func (im *imageManager) lookAhead(ctx context.Context, pod *v1.Pod, containers []*v1.Container) imageLookups {
	var ahead imageLookups
	for _, c := range containers {
		if ahead[c.Image] != nil {
			continue
		}
		l, err := lookup(pod, c.Image, c.ImagePullPolicy, nil)
		if err != nil || l.policy == v1.PullAlways {
			continue
		}
		if ahead == nil {
			ahead = imageLookups{}
		}
		ahead[c.Image] = l
		l.done = make(chan struct{})
		go func() {
			defer close(l.done)
			l.resp, l.err = im.is.ImageStatus(ctx, l.spec, false)
		}()
	}
	return ahead
}

// ensure makes userImage present (a container's image with its
// imagePullPolicy, or an image volume's reference with its pullPolicy),
// as the kubelet's EnsureImageExists: IfNotPresent and Never use a present
// image (with an ImagePullManager, only when it says the pod may: else
// IfNotPresent pulls and Never fails as if the image were absent), Always
// (and IfNotPresent when absent) pull with the credentials of pullSecrets
// matching the image's registry, each in turn, anonymously when none
// match. A failed pull backs off per pod and image (ImagePullBackOff).
// withUser also looks up the image's user (for runAsNonRoot). turn, the
// sync's turn to start, is given up for the pull and taken again after it.
// ahead holds the image's status when the sync looked it up ahead (nil:
// ensure asks the runtime).
func (im *imageManager) ensure(ctx context.Context, pod *v1.Pod, userImage string, policy v1.PullPolicy, ref *v1.ObjectReference, pullSecrets []v1.Secret, sandbox *runtimeapi.PodSandboxConfig, withUser bool, turn *startTurn, ahead imageLookups) imageResult {
	look, err := lookup(pod, userImage, policy, ahead)
	if err != nil {
		msg := fmt.Sprintf("Failed to apply default image tag %q: %v", userImage, err)
		im.recorder.Event(ref, v1.EventTypeWarning, "InspectFailed", msg)
		return imageResult{err: podstate.ErrInvalidImageName, msg: msg}
	}
	image, named, policy, spec := look.image, look.named, look.policy, look.spec
	key := string(pod.UID) + "_" + image
	// The pod's credentials for the image, read once and only when needed.
	creds := sync.OnceValues(func() ([]pullCredential, error) {
		keys, err := newKeyring(pullSecrets)
		if err != nil {
			return nil, err
		}
		return keys.lookup(named.Name()), nil
	})
	if policy != v1.PullAlways {
		resp, err := look.status(ctx, im.is)
		if err != nil {
			msg := fmt.Sprintf("Failed to inspect image %q: %v", image, err)
			im.recorder.Event(ref, v1.EventTypeWarning, "InspectFailed", msg)
			return imageResult{err: podstate.ErrImageInspect, msg: msg}
		}
		img := resp.GetImage()
		if img != nil && im.pulls == nil {
			im.recorder.Event(ref, v1.EventTypeNormal, "Pulled", fmt.Sprintf("Container image %q already present on machine", userImage))
			return imageResult{ref: img.GetId(), user: userOf(img)}
		}
		if img != nil {
			must, err := im.pulls.MustAttemptImagePull(ctx, userImage, img.GetId(), podCredentials(creds))
			if err != nil {
				return im.pullFailed(ref, key, userImage, err)
			}
			if !must {
				im.recorder.Event(ref, v1.EventTypeNormal, "Pulled", fmt.Sprintf("Container image %q already present on machine and can be accessed by the pod", userImage))
				return imageResult{ref: img.GetId(), user: userOf(img)}
			}
		}
		if policy == v1.PullNever {
			// Absent, or present but not to be revealed to this pod.
			msg := fmt.Sprintf("Container image %q is not present with pull policy of Never", userImage)
			im.recorder.Event(ref, v1.EventTypeWarning, "ErrImageNeverPull", msg)
			return imageResult{err: podstate.ErrImageNeverPull, msg: msg}
		}
	}

	if im.pulls != nil {
		if err := im.pulls.RecordPullIntent(ctx, userImage); err != nil {
			return im.pullFailed(ref, key, userImage, fmt.Errorf("record image pull intent: %w", err))
		}
	}
	res, used := im.pullWithBackOff(ctx, pod, userImage, spec, key, ref, creds, sandbox, withUser, turn)
	if im.pulls != nil {
		if res.err == nil {
			im.pulls.RecordImagePulled(ctx, userImage, res.ref, pulledWith(used))
		} else {
			im.pulls.RecordImagePullFailed(ctx, userImage)
		}
	}
	return res
}

// podCredentials is the pod's pull secrets for an image as the
// ImagePullManager reads them.
func podCredentials(creds func() ([]pullCredential, error)) func() ([]kubeletconfig.ImagePullSecret, *kubeletconfig.ImagePullServiceAccount, error) {
	return func() ([]kubeletconfig.ImagePullSecret, *kubeletconfig.ImagePullServiceAccount, error) {
		list, err := creds()
		if err != nil {
			return nil, nil, err
		}
		out := make([]kubeletconfig.ImagePullSecret, len(list))
		for i, c := range list {
			out[i] = c.secret
		}
		return out, nil, nil
	}
}

// pulledWith is what a pull's record keeps of the credentials that worked
// (nil: none, the image is any pod's).
func pulledWith(used *pullCredential) *kubeletconfig.ImagePullCredentials {
	if used == nil {
		return &kubeletconfig.ImagePullCredentials{NodePodsAccessible: true}
	}
	return &kubeletconfig.ImagePullCredentials{KubernetesSecrets: []kubeletconfig.ImagePullSecret{used.secret}}
}

// pullWithBackOff pulls userImage for pod unless its pulls of it back off,
// and returns the credentials that worked (nil: none were needed).
func (im *imageManager) pullWithBackOff(ctx context.Context, pod *v1.Pod, userImage string, spec *runtimeapi.ImageSpec, key string, ref *v1.ObjectReference,
	creds func() ([]pullCredential, error), sandbox *runtimeapi.PodSandboxConfig, withUser bool, turn *startTurn) (imageResult, *pullCredential) {
	logger := klog.FromContext(ctx)
	now := im.clock.Now()
	if im.backOff.IsInBackOffSinceUpdate(key, now) {
		msg := fmt.Sprintf("Back-off pulling image %q", userImage)
		im.recorder.Event(ref, v1.EventTypeNormal, "BackOff", msg)
		im.mu.Lock()
		prev, ok := im.failures[key]
		im.mu.Unlock()
		retryAt := now.Add(im.backOff.Get(key))
		if ok {
			msg += ": " + prev.msg
			retryAt = prev.at.Add(im.backOff.Get(key))
		}
		return imageResult{err: podstate.ErrImagePullBackOff, msg: msg, retryAt: retryAt}, nil
	}
	auths, err := creds()
	if err != nil {
		return im.pullFailed(ref, key, userImage, err), nil
	}
	im.recorder.Event(ref, v1.EventTypeNormal, "Pulling", fmt.Sprintf("Pulling image %q", userImage))
	start := im.clock.Now()
	turn.pause()
	defer func() {
		if err := turn.resume(ctx); err != nil {
			logger.V(4).Info("Interrupted waiting for a turn to start after a pull", "pod", klog.KObj(pod), "err", err)
		}
	}()
	if im.tokens != nil {
		select {
		case im.tokens <- struct{}{}:
		case <-ctx.Done():
			return im.pullFailed(ref, key, userImage, ctx.Err()), nil
		}
	}
	pullStart := im.clock.Now()
	id, used, err := im.pull(ctx, spec, auths, sandbox)
	if im.tokens != nil {
		<-im.tokens
	}
	if err != nil {
		return im.pullFailed(ref, key, userImage, err), nil
	}
	im.mu.Lock()
	delete(im.failures, key)
	im.mu.Unlock()
	var size uint64
	var user imageUser
	if resp, err := im.is.ImageStatus(ctx, &runtimeapi.ImageSpec{Image: id}, false); err == nil && resp.GetImage() != nil {
		size, user = resp.GetImage().GetSize(), userOf(resp.GetImage())
	} else if withUser {
		logger.Info("Cannot read the user of a pulled image", "pod", klog.KObj(pod), "image", userImage, "err", err)
	}
	end := im.clock.Now()
	im.mu.Lock()
	im.pullTime[pod.UID] += end.Sub(start)
	im.mu.Unlock()
	im.recorder.Event(ref, v1.EventTypeNormal, "Pulled", fmt.Sprintf("Successfully pulled image %q in %v (%v including waiting). Image size: %d bytes.",
		userImage, end.Sub(pullStart).Truncate(time.Millisecond), end.Sub(start).Truncate(time.Millisecond), size))
	im.backOff.GC()
	return imageResult{ref: id, user: user}, used
}

func hasLatestTag(named reference.Named) bool {
	t, ok := named.(reference.Tagged)
	return ok && t.Tag() == "latest"
}

func userOf(img *runtimeapi.Image) imageUser {
	u := imageUser{username: img.GetUsername()}
	if img.GetUid() != nil {
		uid := img.GetUid().GetValue()
		u.uid = &uid
	}
	return u
}

// pull pulls with each set of credentials until one works, or anonymously
// when there are none; it returns the image ID and the credentials that
// worked (nil for an anonymous pull).
func (im *imageManager) pull(ctx context.Context, spec *runtimeapi.ImageSpec, auths []pullCredential, sandbox *runtimeapi.PodSandboxConfig) (string, *pullCredential, error) {
	if im.limiter != nil && !im.limiter.TryAccept() {
		return "", nil, errors.New("pull QPS exceeded")
	}
	if len(auths) == 0 {
		id, err := im.is.PullImage(ctx, spec, nil, sandbox)
		return id, nil, err
	}
	var errs []error
	for i := range auths {
		id, err := im.is.PullImage(ctx, spec, auths[i].auth, sandbox)
		if err == nil {
			return id, &auths[i], nil
		}
		errs = append(errs, err)
	}
	return "", nil, errors.Join(errs...)
}

// pullFailed records a failed pull: a Failed event, the next back-off step
// and the error for the BackOff message.
func (im *imageManager) pullFailed(ref *v1.ObjectReference, key, image string, err error) imageResult {
	im.recorder.Event(ref, v1.EventTypeWarning, "Failed", fmt.Sprintf("Failed to pull image %q: %v", image, err))
	now := im.clock.Now()
	im.backOff.Next(key, now)
	im.mu.Lock()
	im.failures[key] = pullFailure{msg: podstate.ErrImagePull.Error() + ": " + err.Error(), at: now}
	im.mu.Unlock()
	return imageResult{err: podstate.ErrImagePull, msg: err.Error(), retryAt: now.Add(im.backOff.Get(key))}
}

// forget drops the pull failures of pod uid.
// pulled returns the time the pod's successful image pulls took.
func (im *imageManager) pulled(uid types.UID) time.Duration {
	im.mu.Lock()
	defer im.mu.Unlock()
	return im.pullTime[uid]
}

func (im *imageManager) forget(uid types.UID) {
	im.mu.Lock()
	defer im.mu.Unlock()
	delete(im.pullTime, uid)
	for key := range im.failures {
		if strings.HasPrefix(key, string(uid)+"_") {
			delete(im.failures, key)
		}
	}
}
