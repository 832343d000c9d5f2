package runtime

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	cri "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodekit/nodekit/ticks"
)

// Defaults of LogRotatorOptions, the kubelet's.
const (
	// DefaultContainerLogMaxSize is containerLogMaxSize (10Mi).
	DefaultContainerLogMaxSize = 10 << 20
	// DefaultContainerLogMaxFiles is containerLogMaxFiles.
	DefaultContainerLogMaxFiles = 5
	// DefaultContainerLogMonitorInterval is containerLogMonitorInterval.
	DefaultContainerLogMonitorInterval = 10 * time.Second
	// DefaultContainerLogMaxWorkers is containerLogMaxWorkers.
	DefaultContainerLogMaxWorkers = 1
)

// Names of rotated log files, the kubelet's: <log>.<timestamp> while the
// runtime may still write to it, then <log>.<timestamp>.gz.
const (
	logTimestampFormat = "20060102-150405"
	logCompressSuffix  = ".gz"
	logTmpSuffix       = ".tmp"
)

// LogRotatorOptions configures a LogRotator. Runtime is required.
type LogRotatorOptions struct {
	// Runtime lists the running containers, reads their log paths and
	// reopens their logs (ReopenContainerLog).
	Runtime cri.RuntimeService
	// MaxSize is the size in bytes a container's log reaches before it is
	// rotated (containerLogMaxSize; default DefaultContainerLogMaxSize);
	// negative disables rotation.
	MaxSize int64
	// MaxFiles is the most log files a container keeps, the current one
	// included (containerLogMaxFiles; default
	// DefaultContainerLogMaxFiles); it must be more than 1.
	MaxFiles int
	// Workers rotate that many containers' logs at once
	// (containerLogMaxWorkers; default 1).
	Workers int
	// MonitorInterval is how often the logs are checked
	// (containerLogMonitorInterval; default 10s).
	MonitorInterval time.Duration
	// Clock paces Run and stamps rotated files (default
	// clock.RealClock{}).
	Clock clock.Clock
	// Align moves the rounds to the node's shared ticks (package ticks;
	// nil waits MonitorInterval exactly).
	Align ticks.Align
	// Running, when set, says whether any container may be running: a
	// round in which it answers false lists and rotates nothing, so a
	// node with no pod asks the runtime nothing every MonitorInterval.
	// The agent answers it from the PLEG's record of the runtime
	// (PLEG.RunningPods), at most a relist old, updated by events and by
	// the agent's own syncs. nil lists the running containers every round,
	// as the kubelet does.
	Running func() bool
	// LogPath, when set, answers a running container's log path (by its
	// pod's UID, from the container's labels, and its ID) from a status
	// the agent already read, and whether it knows it; a container it does
	// not know is asked about (ContainerStatus), as the kubelet asks about
	// every container every round. The agent answers it from the PLEG
	// (PLEG.ContainerLogPath), which holds the ContainerStatus the agent
	// read right after starting the container: a burst's new containers
	// cost the round no call each.
	LogPath func(podUID types.UID, containerID string) (string, bool)
}

// LogRotator rotates the logs of running containers as the kubelet's
// container log manager (pkg/kubelet/logs/container_log_manager.go): every
// MonitorInterval, a running container whose log file is MaxSize or more
// has it renamed to <log>.<timestamp> and the runtime reopens the log
// (ReopenContainerLog), so the runtime writes a new file at the same path
// and readers of the CRI log (kubectl logs) go on; rotated files are
// gzipped at the next rotation and the oldest removed so at most MaxFiles
// remain. A log file that went missing is reopened. Its methods are safe
// for concurrent use.
type LogRotator struct {
	opts  LogRotatorOptions
	rs    cri.RuntimeService
	clock clock.Clock
	mu    sync.Mutex // one round at a time

	// logPaths are the log paths of the running containers, by ID, as
	// their ContainerStatus gave them: a container's log path never
	// changes, so a round asks the runtime only about containers it has
	// not seen (the kubelet asks about every running container every
	// round). Pruned to the listed containers each round; pathsMu guards
	// it against the round's workers.
	pathsMu  sync.Mutex
	logPaths map[string]string
}

// NewLogRotator checks opts and applies defaults. It does no I/O.
func NewLogRotator(opts LogRotatorOptions) (*LogRotator, error) {
	if opts.Runtime == nil {
		return nil, errors.New("container log rotation: the CRI runtime service is required")
	}
	if opts.MaxSize == 0 {
		opts.MaxSize = DefaultContainerLogMaxSize
	}
	if opts.MaxFiles == 0 {
		opts.MaxFiles = DefaultContainerLogMaxFiles
	}
	if opts.MaxFiles <= 1 {
		return nil, fmt.Errorf("container log rotation: invalid MaxFiles %d, must be > 1", opts.MaxFiles)
	}
	if opts.Workers <= 0 {
		opts.Workers = DefaultContainerLogMaxWorkers
	}
	if opts.MonitorInterval <= 0 {
		opts.MonitorInterval = DefaultContainerLogMonitorInterval
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &LogRotator{opts: opts, rs: opts.Runtime, clock: opts.Clock, logPaths: map[string]string{}}, nil
}

// Run rotates every MonitorInterval until ctx is done, then returns nil.
// With a negative MaxSize it only waits for ctx.
func (r *LogRotator) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if r.opts.MaxSize < 0 {
		logger.V(2).Info("Container log rotation is disabled (negative containerLogMaxSize)")
		<-ctx.Done()
		return nil
	}
	logger.Info("Initializing container log rotate workers", "workers", r.opts.Workers, "monitorPeriod", r.opts.MonitorInterval)
	t := r.clock.NewTimer(r.opts.Align.Wait(r.opts.MonitorInterval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			if err := r.RotateLogs(ctx); err != nil && ctx.Err() == nil {
				logger.Error(err, "Failed to rotate container logs")
			}
			t.Reset(r.opts.Align.Wait(r.opts.MonitorInterval))
		}
	}
}

// RotateLogs runs one round: it lists the running containers (none when
// Options.Running says none runs) and rotates the logs that reached
// MaxSize, Workers at a time, returning once all are done. A container's
// failure is logged and does not stop the round; the error is the
// listing's. It blocks for CRI calls and file I/O.
func (r *LogRotator) RotateLogs(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.opts.MaxSize < 0 {
		return nil
	}
	var containers []*runtimeapi.Container
	if r.opts.Running == nil || r.opts.Running() {
		var err error
		containers, err = r.rs.ListContainers(ctx, &runtimeapi.ContainerFilter{
			State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING}})
		if err != nil {
			return fmt.Errorf("failed to list containers: %w", err)
		}
	}
	r.pathsMu.Lock()
	listed := make(map[string]bool, len(containers))
	for _, c := range containers {
		listed[c.GetId()] = true
	}
	for id := range r.logPaths {
		if !listed[id] {
			delete(r.logPaths, id)
		}
	}
	r.pathsMu.Unlock()
	ids := make(chan string)
	var wg sync.WaitGroup
	for range min(r.opts.Workers, len(containers)) {
		wg.Go(func() {
			for id := range ids {
				r.rotateContainer(ctx, id)
			}
		})
	}
	for _, c := range containers {
		// Only running containers write: an exited one keeps its log.
		if c.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
			r.learn(c)
			ids <- c.GetId()
		}
	}
	close(ids)
	wg.Wait()
	return nil
}

// rotateContainer rotates one container's log if it is due.
func (r *LogRotator) rotateContainer(ctx context.Context, id string) {
	logger := klog.FromContext(ctx).WithValues("containerID", id)
	path, err := r.logPath(ctx, id)
	if err != nil {
		logger.Error(err, "Failed to get container status")
		return
	}
	if path == "" {
		return
	}
	info, err := os.Stat(path)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			logger.Error(err, "Failed to stat container log", "path", path)
			return
		}
		if err := r.rs.ReopenContainerLog(ctx, id); err != nil {
			logger.Error(err, "Container log doesn't exist, reopen container log failed", "path", path)
			return
		}
		if info, err = os.Stat(path); err != nil {
			logger.Error(err, "Failed to stat container log after reopen", "path", path)
			return
		}
	}
	if info.Size() < r.opts.MaxSize {
		return
	}
	if err := r.rotate(ctx, id, path); err != nil {
		logger.Error(err, "Failed to rotate log for container", "path", path, "currentSize", info.Size(), "maxSize", r.opts.MaxSize)
		return
	}
	logger.V(2).Info("Rotated container log", "path", path, "size", info.Size())
}

// learn records c's log path from Options.LogPath when the rotator does
// not know it and LogPath does.
func (r *LogRotator) learn(c *runtimeapi.Container) {
	if r.opts.LogPath == nil {
		return
	}
	r.pathsMu.Lock()
	defer r.pathsMu.Unlock()
	if _, ok := r.logPaths[c.GetId()]; ok {
		return
	}
	if path, ok := r.opts.LogPath(types.UID(c.GetLabels()[LabelPodUID]), c.GetId()); ok {
		r.logPaths[c.GetId()] = path
	}
}

// logPath returns the container's log path, from the runtime the first
// time it is not known ("" when it has none).
func (r *LogRotator) logPath(ctx context.Context, id string) (string, error) {
	r.pathsMu.Lock()
	path, ok := r.logPaths[id]
	r.pathsMu.Unlock()
	if ok {
		return path, nil
	}
	resp, err := r.rs.ContainerStatus(ctx, id, false)
	if err != nil {
		return "", err
	}
	path = resp.GetStatus().GetLogPath()
	r.pathsMu.Lock()
	r.logPaths[id] = path
	r.pathsMu.Unlock()
	return path, nil
}

// rotate cleans up leftovers of failed rotations, removes the oldest
// rotated files beyond MaxFiles-2, compresses the others and moves the
// current log aside.
func (r *LogRotator) rotate(ctx context.Context, id, log string) error {
	rotated, err := filepath.Glob(log + ".*")
	if err != nil {
		return fmt.Errorf("failed to list all log files with pattern %q: %w", log+".*", err)
	}
	inUse, unused := splitUnusedLogs(rotated)
	for _, l := range unused {
		if err := os.Remove(l); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("failed to remove unused log %q: %w", l, err)
		}
	}
	// The current log and the one about to be rotated count too: keep at
	// most MaxFiles-2 older ones, removing the oldest first so that a
	// reader following the logs is not broken.
	slices.Sort(inUse)
	excess := max(len(inUse)-max(r.opts.MaxFiles-2, 0), 0)
	for _, l := range inUse[:excess] {
		if err := os.Remove(l); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("failed to remove old log %q: %w", l, err)
		}
	}
	for _, l := range inUse[excess:] {
		if strings.HasSuffix(l, logCompressSuffix) {
			continue
		}
		if err := compressLog(l); err != nil {
			return fmt.Errorf("failed to compress log %q: %w", l, err)
		}
	}
	aside := log + "." + r.clock.Now().Format(logTimestampFormat)
	if err := os.Rename(log, aside); err != nil {
		return fmt.Errorf("failed to rotate log %q to %q: %w", log, aside, err)
	}
	// Once the log is moved aside the reopen must happen even if ctx ends
	// now (shutdown): undoing the rename after a reopen the runtime did
	// but the caller gave up on would replace the file the runtime writes
	// to. The CRI client bounds the call with its own timeout.
	if err := r.rs.ReopenContainerLog(context.WithoutCancel(ctx), id); err != nil {
		// Put it back, to try again next round.
		if rerr := os.Rename(aside, log); rerr != nil {
			klog.FromContext(ctx).Error(rerr, "Failed to rename rotated log", "rotatedLog", aside, "newLog", log, "containerID", id)
		}
		return fmt.Errorf("failed to reopen container log %q: %w", id, err)
	}
	return nil
}

// splitUnusedLogs tells rotated logs from leftovers of a failed rotation:
// temporary files, and uncompressed files whose compressed copy exists.
func splitUnusedLogs(logs []string) (inUse, unused []string) {
	for _, l := range logs {
		if strings.HasSuffix(l, logTmpSuffix) || (!strings.HasSuffix(l, logCompressSuffix) && slices.Contains(logs, l+logCompressSuffix)) {
			unused = append(unused, l)
			continue
		}
		inUse = append(inUse, l)
	}
	return inUse, unused
}

// compressLog gzips log into log.gz through a temporary file, then
// removes log.
func compressLog(log string) error {
	info, err := os.Stat(log)
	if err != nil {
		return err
	}
	in, err := os.Open(log)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := log + logTmpSuffix
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, info.Mode())
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // best effort, after a failure
	w := gzip.NewWriter(out)
	_, err = io.Copy(w, in)
	err = errors.Join(err, w.Close(), out.Close())
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, log+logCompressSuffix); err != nil {
		return err
	}
	return os.Remove(log)
}
