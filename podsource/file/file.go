package file

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
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

// DefaultCheckFrequency is how often the manifests are read again without
// a change notification, the kubelet's fileCheckFrequency default.
const DefaultCheckFrequency = 20 * time.Second

// Options configures a Source.
type Options struct {
	// Path is the manifest directory or a single manifest file (the
	// kubelet's staticPodPath); required. It need not exist yet.
	Path string
	// NodeName is the node the pods run on; required.
	NodeName string
	// CheckFrequency is how often Path is read again besides the change
	// notifications; default 20 s.
	CheckFrequency time.Duration
	// Strict makes unknown and duplicate fields in a manifest errors (the
	// manifest is not used); by default they are ignored with a warning,
	// as the kubelet ignores them.
	Strict bool
	// Recorder, when set, receives a Warning event on the node for every
	// manifest problem (see manifest.Reporter).
	Recorder record.EventRecorder
	// NodeRef returns the object the events are recorded against, at each
	// event; default the node's reference without its UID
	// (manifest.NodeReference). The agent gives the node's UID once it is
	// known, as the kubelet does. It must not block.
	NodeRef func() *v1.ObjectReference
	// Clock paces the periodic reads; default clock.RealClock{}.
	Clock clock.Clock
}

// Source is the kubelet's "file" pod source: the static pods of a manifest
// directory (or of one manifest file). Create it with New; a
// podsource.Config runs it.
type Source struct {
	path     string
	period   time.Duration
	clock    clock.Clock
	decoder  *manifest.Decoder
	reporter *manifest.Reporter
	// watch enables change notifications (inotify on Linux); tests of the
	// periodic read turn it off.
	watch bool

	// The fields below belong to Run's goroutine.

	// files caches, per manifest path, what was read last.
	files map[string]*fileState
	// skipped are the paths already logged as not manifests.
	skipped map[string]bool
	// owners are, per pod name, the file whose pod was last sent.
	owners map[types.NamespacedName]string
}

// fileState is what a manifest held when last read.
type fileState struct {
	data     []byte
	pod      *v1.Pod
	warnings []string
	err      error
	// good is the last valid pod read from the file, kept while the file
	// is invalid.
	good *v1.Pod
}

var _ podsource.Source = (*Source)(nil)

// New validates opts and returns a Source. It does not touch the
// filesystem.
func New(opts Options) (*Source, error) {
	if opts.Path == "" {
		return nil, errors.New("podsource/file: Options.Path is required")
	}
	switch {
	case opts.CheckFrequency < 0:
		return nil, fmt.Errorf("podsource/file: CheckFrequency %v must not be negative", opts.CheckFrequency)
	case opts.CheckFrequency == 0:
		opts.CheckFrequency = DefaultCheckFrequency
	}
	dec, err := manifest.NewDecoder(manifest.Options{NodeName: opts.NodeName, Source: podsource.FileSource, Strict: opts.Strict})
	if err != nil {
		return nil, fmt.Errorf("podsource/file: %w", err)
	}
	if opts.NodeRef == nil {
		ref := manifest.NodeReference(opts.NodeName)
		opts.NodeRef = func() *v1.ObjectReference { return ref }
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	path := opts.Path
	if len(path) > 1 {
		path = strings.TrimRight(path, string(os.PathSeparator))
	}
	return &Source{
		path:     path,
		period:   opts.CheckFrequency,
		clock:    opts.Clock,
		decoder:  dec,
		reporter: manifest.NewReporter(opts.Recorder, opts.NodeRef),
		watch:    watchSupported,
		files:    make(map[string]*fileState),
		skipped:  make(map[string]bool),
	}, nil
}

// Name returns podsource.FileSource ("file").
func (s *Source) Name() string { return podsource.FileSource }

// Run reads the manifests at once, then whenever the watch reports a change
// in the directory (inotify on Linux) and every CheckFrequency, and sends
// the complete set of pods on out whenever it changed (always the first
// time, empty when the path does not exist). A manifest that cannot be
// used is reported (see manifest.Reporter) and leaves the other pods alone:
// a new one is not run, one that was valid keeps its last valid pod until
// it is fixed or removed. Run returns nil when ctx is done; it may be
// called once.
func (s *Source) Run(ctx context.Context, out chan<- []*v1.Pod) error {
	logger := klog.FromContext(ctx).WithValues("path", s.path)
	ctx = klog.NewContext(ctx, logger)
	logger.V(1).Info("Watching static pod manifests", "checkFrequency", s.period)
	timer := s.clock.NewTimer(s.period)
	defer timer.Stop()

	var w *watcher
	defer func() {
		if w != nil {
			w.close()
		}
	}()
	var sent []*v1.Pod
	first := true
	for {
		if s.watch && w == nil {
			var err error
			if w, err = newWatcher(s.path); err != nil {
				logger.V(2).Info("Cannot watch static pod manifests, reading them every check period", "err", err)
				w = nil
			}
		}
		if pods, ok := s.scan(ctx); ok && (first || !samePods(sent, pods)) {
			select {
			case out <- pods:
			case <-ctx.Done():
				return nil
			}
			first, sent = false, pods
		}

		var changes <-chan struct{}
		if w != nil {
			changes = w.changes
		}
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C():
			timer.Reset(s.period)
		case _, open := <-changes:
			if !open {
				// The watch ended (the directory went away, or an error):
				// read again now and set up a new watch.
				if err := w.err(); err != nil {
					logger.V(2).Info("Static pod manifest watch ended", "err", err)
				}
				w.close()
				w = nil
			}
		}
	}
}

// scan reads the manifests and returns the pods to send; false when the
// path cannot be read (nothing to send: the pods stay as last sent).
func (s *Source) scan(ctx context.Context) ([]*v1.Pod, bool) {
	logger := klog.FromContext(ctx)
	info, err := os.Stat(s.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if !s.skipped[s.path] {
			logger.Info("Static pod path does not exist, no static pods", "path", s.path)
			s.skipped[s.path] = true
		}
		s.files = make(map[string]*fileState)
		s.owners = nil
		s.reporter.Retain(func(string) bool { return false })
		return []*v1.Pod{}, true
	case err != nil:
		s.reporter.Report(ctx, s.path, manifest.ReasonUnavailable, err)
		return nil, false
	}
	delete(s.skipped, s.path)

	var paths []string
	switch {
	case info.IsDir():
		entries, err := os.ReadDir(s.path)
		if err != nil {
			s.reporter.Report(ctx, s.path, manifest.ReasonUnavailable, err)
			return nil, false
		}
		s.reporter.Clear(ctx, s.path)
		// ReadDir sorts by name, as the kubelet's glob does.
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), ".") {
				paths = append(paths, filepath.Join(s.path, e.Name()))
			}
		}
	case info.Mode().IsRegular():
		paths = []string{s.path}
	default:
		s.reporter.Report(ctx, s.path, manifest.ReasonUnavailable, errors.New("not a directory or a regular file"))
		return nil, false
	}

	type candidate struct {
		path string
		pod  *v1.Pod
		name types.NamespacedName
	}
	var candidates []candidate
	present := make(map[string]bool, len(paths))
	for _, path := range paths {
		pod, ok := s.read(ctx, path)
		if !ok {
			continue
		}
		present[path] = true
		if pod != nil {
			candidates = append(candidates, candidate{path, pod, types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}})
		}
	}
	// Of the files naming the same pod, the one whose pod runs keeps it;
	// among new ones, the first in name order.
	winner := make(map[types.NamespacedName]string, len(candidates))
	for _, c := range candidates {
		if s.owners[c.name] == c.path {
			winner[c.name] = c.path
		}
	}
	for _, c := range candidates {
		if _, ok := winner[c.name]; !ok {
			winner[c.name] = c.path
		}
	}
	pods := make([]*v1.Pod, 0, len(candidates))
	owners := make(map[types.NamespacedName]string, len(candidates))
	uids := make(map[types.UID]string, len(candidates))
	for _, c := range candidates {
		if w := winner[c.name]; w != c.path {
			s.reporter.Report(ctx, c.path, manifest.ReasonInvalid,
				fmt.Errorf("pod %s has the name of the pod of %s, ignoring it", c.name, w))
			continue
		}
		if other, dup := uids[c.pod.UID]; dup {
			s.reporter.Report(ctx, c.path, manifest.ReasonInvalid,
				fmt.Errorf("pod %s has the UID %s of the pod of %s, ignoring it", c.name, c.pod.UID, other))
			continue
		}
		owners[c.name], uids[c.pod.UID] = c.path, c.path
		pods = append(pods, c.pod)
		s.reportFile(ctx, c.path)
	}
	s.owners = owners
	for path := range s.files {
		if !present[path] {
			delete(s.files, path)
		}
	}
	s.reporter.Retain(func(l string) bool { return l == s.path || present[l] })
	return pods, true
}

// read reads the manifest at path through the cache and returns the pod to
// run for it (nil when none) and whether path is a manifest at all. It
// reports problems except for valid pods, which the caller reports once
// it checked names (reportFile).
func (s *Source) read(ctx context.Context, path string) (*v1.Pod, bool) {
	logger := klog.FromContext(ctx)
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		// Removed since the directory was read (or a dangling link).
		return nil, false
	case err != nil:
		s.reporter.Report(ctx, path, manifest.ReasonUnavailable, err)
		return s.keep(path), true
	case info.IsDir():
		if !s.skipped[path] {
			logger.Info("Not recursing into a directory of the static pod path", "dir", path)
			s.skipped[path] = true
		}
		return nil, false
	case !info.Mode().IsRegular():
		if !s.skipped[path] {
			logger.Info("Ignoring a static pod path entry that is not a regular file", "entry", path, "mode", info.Mode())
			s.skipped[path] = true
		}
		return nil, false
	}
	delete(s.skipped, path)

	data, err := readAtMost(path, manifest.MaxSize)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, false
		}
		s.reporter.Report(ctx, path, manifest.ReasonUnavailable, err)
		return s.keep(path), true
	}
	if len(data) == 0 {
		// Most likely created or truncated and not written yet (cp, an
		// editor): wait for the content without a report.
		logger.V(2).Info("Static pod manifest is empty, ignoring it until it has content", "file", path)
		return s.keep(path), true
	}
	st := s.files[path]
	if st == nil || !bytes.Equal(st.data, data) {
		prev := st
		st = &fileState{data: data}
		st.pod, st.warnings, st.err = s.decoder.Pod(data, path)
		if prev != nil {
			st.good = prev.good
		}
		if st.err == nil {
			st.good = st.pod
			logger.V(4).Info("Read static pod manifest", "file", path, "pod", klog.KObj(st.pod), "podUID", st.pod.UID)
		}
		s.files[path] = st
	}
	if st.err != nil {
		err := st.err
		if st.good != nil {
			err = fmt.Errorf("%w (the pod keeps running as last read)", err)
		}
		s.reporter.Report(ctx, path, manifest.ReasonInvalid, err)
		return st.good, true
	}
	return st.pod, true
}

// keep returns the last valid pod of path, if any.
func (s *Source) keep(path string) *v1.Pod {
	if st := s.files[path]; st != nil {
		return st.good
	}
	return nil
}

// reportFile reports the warnings of a manifest whose pod is run, or
// clears its problems.
func (s *Source) reportFile(ctx context.Context, path string) {
	st := s.files[path]
	switch {
	case st == nil || st.err != nil:
		// Reported by read.
	case len(st.warnings) > 0:
		s.reporter.Report(ctx, path, manifest.ReasonWarning, errors.New(strings.Join(st.warnings, "; ")))
	default:
		s.reporter.Clear(ctx, path)
	}
}

// readAtMost reads the file at path, failing when it is larger than limit
// bytes.
func readAtMost(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("manifest is larger than %d bytes", limit)
	}
	return data, nil
}

// samePods reports whether two snapshots hold the same pod objects in the
// same order (the cache hands out the same object while a file is
// unchanged).
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
