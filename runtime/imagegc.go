package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	cri "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/ticks"
)

// Defaults of ImageGCOptions, the kubelet's.
const (
	// DefaultImageGCPeriod is how often images are garbage collected (the
	// kubelet's ImageGCPeriod).
	DefaultImageGCPeriod = 5 * time.Minute
	// DefaultImageGCHighThresholdPercent and
	// DefaultImageGCLowThresholdPercent are imageGCHighThresholdPercent
	// and imageGCLowThresholdPercent.
	DefaultImageGCHighThresholdPercent = 85
	DefaultImageGCLowThresholdPercent  = 80
	// DefaultImageMinimumGCAge is imageMinimumGCAge.
	DefaultImageMinimumGCAge = 2 * time.Minute
)

// Reasons of kubelet_image_garbage_collected_total, the kubelet's.
const (
	imageGCReasonAge   = "age"
	imageGCReasonSpace = "space"
)

// ImageFsStatsFunc returns the capacity and the available bytes of the
// filesystem holding the runtime's images.
type ImageFsStatsFunc func(ctx context.Context) (capacity, available uint64, err error)

// PostImageGCHook is told, after each collection, the IDs of the images
// left on the node (as far as the collection knows: those it listed and
// did not remove) and when the collection began, before it listed them
// (the kubelet's PostImageGCHook). It runs with collections serialized and
// must not call the ImageGC.
type PostImageGCHook func(ctx context.Context, remainingImages []string, gcStart time.Time)

// ImageGCOptions configures an ImageGC. Runtime and Images are required.
type ImageGCOptions struct {
	// Runtime lists the containers whose images are in use; Images lists
	// and removes images (and answers ImageFsInfo for the default
	// FsStats).
	Runtime cri.RuntimeService
	Images  cri.ImageManagerService
	// HighThresholdPercent and LowThresholdPercent: when the image
	// filesystem is HighThresholdPercent full or more, unused images are
	// removed, least recently used first, until it is LowThresholdPercent
	// full. nil means the kubelet's defaults (85 and 80); 100 disables
	// removal for space.
	HighThresholdPercent, LowThresholdPercent *int
	// MinAge: an unused image is not removed for space until it was first
	// seen this long ago (nil: DefaultImageMinimumGCAge).
	MinAge *time.Duration
	// MaxAge: an image unused for longer is removed whatever the disk
	// usage, once the ImageGC has run for MaxAge (0 disables it, the
	// kubelet's default).
	MaxAge time.Duration
	// PinnedImages are never removed (tags, digests or IDs), in addition
	// to the images the runtime reports pinned and the sandbox image its
	// configuration names (containerd 1.6 does not mark it pinned): the
	// kubelet's --pod-infra-container-image.
	PinnedImages []string
	// FsStats reports the image filesystem's usage; nil asks the runtime
	// for the image filesystem's mount point (ImageFsInfo) and statfs(2)s
	// it, as the kubelet's stats provider does.
	FsStats ImageFsStatsFunc
	// Period is how often Run collects (default DefaultImageGCPeriod).
	Period time.Duration
	// NodeName names the node the ImageGCFailed, FreeDiskSpaceFailed and
	// InvalidDiskCapacity events are about.
	NodeName string
	// Recorder receives those events; nil records none.
	Recorder record.EventRecorder
	// Clock paces Run and dates images (default clock.RealClock{}).
	Clock clock.Clock
	// Align moves the rounds to the node's shared ticks (package ticks;
	// nil waits Period exactly).
	Align ticks.Align
	// Registerer registers kubelet_image_garbage_collected_total; nil
	// registers nothing.
	Registerer prometheus.Registerer
	// ImageMounts knows the images the containers mount as image volumes
	// (in use): give it the PodManager's, which records the containers it
	// creates. nil: an ImageMounts of the ImageGC's own, which asks the
	// runtime for each container's status once.
	ImageMounts *ImageMounts
	// PostGC are called after each collection (GarbageCollect and
	// DeleteUnusedImages) that could list the images: the image pull
	// manager's PruneUnknownRecords, so the records of removed images go.
	PostGC []PostImageGCHook
}

// ImageGC removes unused images as the kubelet's image garbage collector
// (pkg/kubelet/images/image_gc_manager.go): images no container uses (any
// container the runtime has, exited ones included) and not pinned, least
// recently used first, when the image filesystem is over the high
// threshold, down to the low one, and images unused for longer than MaxAge.
// An image is "used" when a container's image ID, tag or digest names it;
// it is "first seen" when the ImageGC first listed it. Its methods are safe
// for concurrent use; collections are serialized.
type ImageGC struct {
	opts      ImageGCOptions
	high, low int
	minAge    time.Duration
	clock     clock.Clock
	recorder  record.EventRecorder
	nodeRef   *v1.ObjectReference
	collected *prometheus.CounterVec
	began     time.Time
	mounts    *ImageMounts

	// mu serializes collections and guards records and noFs.
	mu      sync.Mutex
	records map[string]*imageRecord
	// noFs is set once the image filesystem was found missing (logged).
	noFs bool
}

// imageRecord is what the ImageGC knows of an image, by ID.
type imageRecord struct {
	firstDetected time.Time
	lastUsed      time.Time
	size          int64
	pinned        bool
}

// NewImageGC checks opts and applies defaults. It does no I/O.
func NewImageGC(opts ImageGCOptions) (*ImageGC, error) {
	if opts.Runtime == nil || opts.Images == nil {
		return nil, errors.New("image GC: the CRI runtime and image services are required")
	}
	g := &ImageGC{opts: opts, high: DefaultImageGCHighThresholdPercent, low: DefaultImageGCLowThresholdPercent,
		minAge: DefaultImageMinimumGCAge, records: map[string]*imageRecord{}, mounts: opts.ImageMounts}
	if g.mounts == nil {
		g.mounts = NewImageMounts()
	}
	if opts.HighThresholdPercent != nil {
		g.high = *opts.HighThresholdPercent
	}
	if opts.LowThresholdPercent != nil {
		g.low = *opts.LowThresholdPercent
	}
	if g.high < 0 || g.high > 100 {
		return nil, fmt.Errorf("image GC: invalid HighThresholdPercent %d, must be in range [0-100]", g.high)
	}
	if g.low < 0 || g.low > 100 {
		return nil, fmt.Errorf("image GC: invalid LowThresholdPercent %d, must be in range [0-100]", g.low)
	}
	if g.low > g.high {
		return nil, fmt.Errorf("image GC: LowThresholdPercent %d can not be higher than HighThresholdPercent %d", g.low, g.high)
	}
	if opts.MinAge != nil {
		g.minAge = *opts.MinAge
	}
	if opts.MaxAge < 0 || g.minAge < 0 {
		return nil, errors.New("image GC: MinAge and MaxAge must not be negative")
	}
	if opts.MaxAge > 0 && opts.MaxAge <= g.minAge {
		return nil, fmt.Errorf("image GC: MaxAge %v must be greater than MinAge %v", opts.MaxAge, g.minAge)
	}
	if opts.Period <= 0 {
		opts.Period = DefaultImageGCPeriod
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.FsStats == nil {
		opts.FsStats = imageFsStats(opts.Images)
	}
	g.opts, g.clock, g.recorder = opts, opts.Clock, opts.Recorder
	g.began = g.clock.Now()
	g.nodeRef = &v1.ObjectReference{Kind: "Node", Name: opts.NodeName, UID: types.UID(opts.NodeName)}
	if opts.Registerer != nil {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{
			Subsystem: "kubelet", Name: "image_garbage_collected_total",
			Help: "Total number of images garbage collected by the kubelet, whether through disk usage or image age.",
		}, []string{"reason"})
		var err error
		if g.collected, err = register(opts.Registerer, c); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Enabled reports whether the ImageGC would ever remove an image: not with
// a high threshold of 100 and no MaxAge, when the kubelet does not run its
// image GC either.
func (g *ImageGC) Enabled() bool { return g.high < 100 || g.opts.MaxAge > 0 }

// Run collects at once, then every Period, until ctx is done; it returns
// nil then. A failed collection is logged, and recorded as an
// ImageGCFailed Warning event on the node when the one before failed too
// (the first may fail because the runtime is not up yet), as the kubelet.
// When the ImageGC is not Enabled it logs so and only waits for ctx.
func (g *ImageGC) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if !g.Enabled() {
		logger.V(2).Info("ImageGCHighThresholdPercent is set 100 and ImageMaximumGCAge is 0, Disable image GC")
		<-ctx.Done()
		return nil
	}
	g.mu.Lock()
	g.began = g.clock.Now()
	g.mu.Unlock()
	failed := false
	collect := func() {
		err := g.GarbageCollect(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
		case err != nil && failed:
			logger.Error(err, "Image garbage collection failed multiple times in a row")
			g.event(v1.EventTypeWarning, "ImageGCFailed", err.Error())
		case err != nil:
			logger.Error(err, "Image garbage collection failed once. Stats initialization may not have completed yet")
		case failed:
			logger.Info("Image garbage collection succeeded")
		default:
			logger.V(4).Info("Image garbage collection succeeded")
		}
		failed = err != nil
	}
	collect()
	t := g.clock.NewTimer(g.opts.Align.Wait(g.opts.Period))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			collect()
			t.Reset(g.opts.Align.Wait(g.opts.Period))
		}
	}
}

// GarbageCollect runs one collection: images unused for longer than MaxAge
// go (once the ImageGC has run for MaxAge), then, when the image
// filesystem is at least HighThresholdPercent full, unused images older
// than MinAge go, least recently used first, until LowThresholdPercent.
// Not freeing enough is an error (and a FreeDiskSpaceFailed event). An
// image filesystem that does not exist on this machine (FsStats fails with
// fs.ErrNotExist: a fake runtime) is logged once and skips the disk usage
// part. Once the images could be listed, the PostGC hooks run at the end
// whatever happened. It blocks for the CRI calls and statfs.
func (g *ImageGC) GarbageCollect(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	logger := klog.FromContext(ctx)
	now := g.clock.Now()
	images, err := g.evictionOrder(ctx, now)
	if err != nil {
		return err
	}
	defer g.postGC(ctx, now)
	if images, err = g.freeOld(ctx, images, now); err != nil {
		return err
	}
	c, a, err := g.opts.FsStats(ctx)
	if errors.Is(err, fs.ErrNotExist) {
		// A runtime whose image filesystem is not on this machine (a fake
		// runtime): nothing to measure, nothing to free for space.
		if !g.noFs {
			logger.Info("The image filesystem does not exist on this machine; image garbage collection by disk usage is skipped", "err", err)
			g.noFs = true
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("image filesystem usage: %w", err)
	}
	g.noFs = false
	capacity, available := int64(min(c, math.MaxInt64)), int64(min(a, math.MaxInt64))
	if available > capacity {
		logger.Info("Availability is larger than capacity", "available", available, "capacity", capacity)
		available = capacity
	}
	if capacity == 0 {
		err := errors.New("invalid capacity 0 on image filesystem")
		g.event(v1.EventTypeWarning, "InvalidDiskCapacity", err.Error())
		return err
	}
	usage := 100 - int(available*100/capacity)
	if usage < g.high {
		return nil
	}
	toFree := capacity*int64(100-g.low)/100 - available
	logger.Info("Disk usage on image filesystem is over the high threshold, trying to free bytes down to the low threshold",
		"usage", usage, "highThreshold", g.high, "amountToFree", toFree, "lowThreshold", g.low)
	freed, err := g.freeSpace(ctx, toFree, now, images)
	if err != nil {
		return err
	}
	if freed < toFree {
		msg := fmt.Sprintf("Insufficient free disk space on the node's image filesystem (%d%% of %s used). "+
			"Failed to free sufficient space by deleting unused images (freed %d bytes). "+
			"Investigate disk usage, as it could be used by active images, logs, volumes, or other data.",
			usage, formatSize(capacity), freed)
		g.event(v1.EventTypeWarning, "FreeDiskSpaceFailed", msg)
		return errors.New(msg)
	}
	return nil
}

// DeleteUnusedImages removes every image no container uses and that is not
// pinned, older than MinAge, whatever the disk usage: the kubelet's
// DeleteUnusedImages, which the eviction manager calls to reclaim the
// image filesystem; then the PostGC hooks run. It blocks for the CRI
// calls.
func (g *ImageGC) DeleteUnusedImages(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	klog.FromContext(ctx).Info("Attempting to delete unused images")
	now := g.clock.Now()
	images, err := g.evictionOrder(ctx, now)
	if err != nil {
		return err
	}
	defer g.postGC(ctx, now)
	_, err = g.freeSpace(ctx, math.MaxInt64, now, images)
	return err
}

// postGC calls the PostGC hooks with the images left. g.mu is held.
func (g *ImageGC) postGC(ctx context.Context, began time.Time) {
	if len(g.opts.PostGC) == 0 {
		return
	}
	left := slices.Collect(maps.Keys(g.records))
	for _, h := range g.opts.PostGC {
		h(ctx, left, began)
	}
}

// evictionCandidate is an unused, unpinned image.
type evictionCandidate struct {
	id string
	imageRecord
}

// evictionOrder lists the images, updates the records (first seen, last
// used, size, pinned) and returns the unused, unpinned ones, least recently
// used first (first seen first among equals).
func (g *ImageGC) evictionOrder(ctx context.Context, now time.Time) ([]evictionCandidate, error) {
	images, err := g.opts.Images.ListImages(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	containers, err := g.opts.Runtime.ListContainers(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	used := map[string]bool{}
	for _, c := range containers {
		used[c.GetImageRef()] = true
		used[c.GetImage().GetImage()] = true
	}
	// Image volumes: an image a container mounts is in use, as the
	// kubelet's handleImageVolumes reads each container's mounts (known
	// from their creation; a container's status is asked once otherwise).
	if err := g.mounts.inUse(ctx, g.opts.Runtime, containers, used); err != nil {
		return nil, err
	}
	delete(used, "")
	pinned := map[string]bool{}
	for _, p := range append(g.runtimePinned(ctx), g.opts.PinnedImages...) {
		pinned[p] = true
	}
	names := func(img *runtimeapi.Image) []string {
		return append(append([]string{img.GetId()}, img.GetRepoTags()...), img.GetRepoDigests()...)
	}
	current := map[string]bool{}
	var out []evictionCandidate
	for _, img := range images {
		id := img.GetId()
		current[id] = true
		r := g.records[id]
		if r == nil {
			r = &imageRecord{firstDetected: now}
			g.records[id] = r
		}
		inUse := slices.ContainsFunc(names(img), func(n string) bool { return used[n] })
		if inUse {
			r.lastUsed = now
		}
		r.size = int64(img.GetSize())
		r.pinned = img.GetPinned() || slices.ContainsFunc(names(img), func(n string) bool { return pinned[n] })
		if inUse || r.pinned {
			continue
		}
		out = append(out, evictionCandidate{id: id, imageRecord: *r})
	}
	for id := range g.records {
		if !current[id] {
			delete(g.records, id)
		}
	}
	slices.SortStableFunc(out, func(a, b evictionCandidate) int {
		if a.lastUsed.Equal(b.lastUsed) {
			return a.firstDetected.Compare(b.firstDetected)
		}
		return a.lastUsed.Compare(b.lastUsed)
	})
	klog.FromContext(ctx).V(5).Info("Images eligible for garbage collection", "count", len(out), "images", len(images))
	return out, nil
}

// runtimePinned returns the images the runtime's configuration pins but
// its image list may not mark pinned: containerd 1.6's sandbox image
// ("sandboxImage" in its verbose status' config), containerd 2's
// "pinnedImages". Nothing when the runtime does not say.
func (g *ImageGC) runtimePinned(ctx context.Context) []string {
	resp, err := g.opts.Runtime.Status(ctx, true)
	if err != nil {
		klog.FromContext(ctx).V(4).Info("Cannot read the runtime's configuration for its pinned images", "err", err)
		return nil
	}
	var cfg struct {
		SandboxImage string            `json:"sandboxImage"`
		PinnedImages map[string]string `json:"pinnedImages"`
	}
	if json.Unmarshal([]byte(resp.GetInfo()["config"]), &cfg) != nil {
		return nil
	}
	out := slices.Collect(maps.Values(cfg.PinnedImages))
	if cfg.SandboxImage != "" {
		out = append(out, cfg.SandboxImage)
	}
	return out
}

// freeOld removes the candidates unused for longer than MaxAge and returns
// the others.
func (g *ImageGC) freeOld(ctx context.Context, images []evictionCandidate, now time.Time) ([]evictionCandidate, error) {
	if g.opts.MaxAge == 0 || now.Sub(g.began) <= g.opts.MaxAge {
		// Until MaxAge passed since the ImageGC started, an image's last
		// use before the start is unknown.
		return images, nil
	}
	var errs []error
	var left []evictionCandidate
	for _, img := range images {
		if now.Sub(img.lastUsed) <= g.opts.MaxAge {
			left = append(left, img)
			continue
		}
		if err := g.remove(ctx, img, imageGCReasonAge); err != nil {
			errs = append(errs, err)
			left = append(left, img)
		}
	}
	if len(errs) > 0 {
		return left, fmt.Errorf("wanted to free images older than %v, encountered errors in image deletion: %w", g.opts.MaxAge, errors.Join(errs...))
	}
	return left, nil
}

// freeSpace removes candidates older than MinAge, in order, until toFree
// bytes are freed, and returns the bytes freed.
func (g *ImageGC) freeSpace(ctx context.Context, toFree int64, now time.Time, images []evictionCandidate) (int64, error) {
	logger := klog.FromContext(ctx)
	var errs []error
	freed := int64(0)
	for _, img := range images {
		if !img.lastUsed.Before(now) {
			continue // used now
		}
		if now.Sub(img.firstDetected) < g.minAge {
			logger.V(5).Info("Image ID's age is less than the policy's minAge, not eligible for garbage collection",
				"imageID", img.id, "age", now.Sub(img.firstDetected), "minAge", g.minAge)
			continue
		}
		if err := g.remove(ctx, img, imageGCReasonSpace); err != nil {
			errs = append(errs, err)
			continue
		}
		freed += img.size
		if freed >= toFree {
			break
		}
	}
	if len(errs) > 0 {
		return freed, fmt.Errorf("wanted to free %d bytes, but freed %d bytes space with errors in image deletion: %w", toFree, freed, errors.Join(errs...))
	}
	return freed, nil
}

// remove removes one image and forgets it.
func (g *ImageGC) remove(ctx context.Context, img evictionCandidate, reason string) error {
	klog.FromContext(ctx).Info("Removing image to free bytes", "imageID", img.id, "size", img.size, "reason", reason)
	if err := g.opts.Images.RemoveImage(ctx, &runtimeapi.ImageSpec{Image: img.id}); err != nil {
		return fmt.Errorf("remove image %s: %w", img.id, err)
	}
	delete(g.records, img.id)
	if g.collected != nil {
		g.collected.WithLabelValues(reason).Inc()
	}
	return nil
}

func (g *ImageGC) event(typ, reason, msg string) {
	if g.recorder != nil {
		g.recorder.Event(g.nodeRef, typ, reason, msg)
	}
}

// imageFsStats asks the runtime for its image filesystem's mount point and
// reads its capacity with statfs(2).
func imageFsStats(images cri.ImageManagerService) ImageFsStatsFunc {
	return func(ctx context.Context) (uint64, uint64, error) {
		resp, err := images.ImageFsInfo(ctx)
		if err != nil {
			return 0, 0, err
		}
		fs := resp.GetImageFilesystems()
		if len(fs) == 0 || fs[0].GetFsId().GetMountpoint() == "" {
			return 0, 0, errors.New("the runtime reports no image filesystem mount point")
		}
		var st unix.Statfs_t
		if err := unix.Statfs(fs[0].GetFsId().GetMountpoint(), &st); err != nil {
			return 0, 0, fmt.Errorf("statfs %s: %w", fs[0].GetFsId().GetMountpoint(), err)
		}
		return st.Blocks * uint64(st.Bsize), st.Bavail * uint64(st.Bsize), nil
	}
}

// formatSize renders a byte count as the kubelet's events do.
func formatSize(b int64) string {
	const unit = 1024
	size := float64(b)
	switch {
	case b < unit:
		return fmt.Sprintf("%d B", b)
	case b < unit*unit:
		return fmt.Sprintf("%.1f KiB", size/unit)
	case b < unit*unit*unit:
		return fmt.Sprintf("%.1f MiB", size/(unit*unit))
	case b < unit*unit*unit*unit:
		return fmt.Sprintf("%.1f GiB", size/(unit*unit*unit))
	}
	return fmt.Sprintf("%.1f TiB", size/(unit*unit*unit*unit))
}
