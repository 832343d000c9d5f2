package volume

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"
)

// reconstruct records the volumes found on disk (the kubelet's
// reconstruction of its actual state): pods/<uid>/volumes/<plugin>/<name>.
func (m *Manager) reconstruct() error {
	entries, err := os.ReadDir(m.podsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		uid := types.UID(e.Name())
		vols, err := volumesOnDisk(filepath.Join(m.podsDir, e.Name()))
		if err != nil || len(vols) == 0 {
			continue
		}
		if m.found[uid] == nil {
			m.found[uid] = map[string]string{}
		}
		for _, v := range vols {
			if ps := m.pods[uid]; ps != nil {
				if vs := ps.volumes[v.name]; vs != nil && vs.mounted {
					continue
				}
			}
			m.found[uid][v.name] = v.plugin
		}
	}
	return nil
}

// diskVolume is a volume directory found on disk.
type diskVolume struct {
	plugin, name string
}

// volumesOnDisk lists <podDir>/volumes/<escaped plugin>/<name>.
func volumesOnDisk(podDir string) ([]diskVolume, error) {
	volsDir := filepath.Join(podDir, "volumes")
	plugins, err := os.ReadDir(volsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []diskVolume
	for _, p := range plugins {
		if !p.IsDir() {
			continue
		}
		vols, err := os.ReadDir(filepath.Join(volsDir, p.Name()))
		if err != nil {
			return nil, err
		}
		for _, v := range vols {
			out = append(out, diskVolume{plugin: unescapePluginName(p.Name()), name: v.Name()})
		}
	}
	return out, nil
}

// cleanupOrphans tears down the volumes of every pod on disk that the
// Manager does not mount and PodKnown does not know, once the sources are
// ready, and removes the pod's directory.
//
// It reports whether another look is due within CleanupPeriod: the sources
// are not ready yet, the directory could not be read, or a pod directory
// is not one the Manager mounts (an orphan not cleaned up yet, or a pod
// that may become one without the Manager hearing of it).
func (m *Manager) cleanupOrphans(ctx context.Context) (pending bool) {
	if m.opts.PodKnown == nil {
		return false
	}
	if m.opts.SourcesReady != nil && !m.opts.SourcesReady() {
		return true
	}
	entries, err := os.ReadDir(m.podsDir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			klog.FromContext(ctx).Error(err, "Failed to list pod directories")
			return true
		}
		return false
	}
	for _, e := range entries {
		uid := types.UID(e.Name())
		m.mu.Lock()
		_, mounted := m.pods[uid]
		m.mu.Unlock()
		if !e.IsDir() || mounted {
			continue
		}
		pending = true
		if m.opts.PodKnown(uid) {
			continue
		}
		err := m.cleanupOrphan(ctx, uid)
		m.mu.Lock()
		last, seen := m.orphanErrs[uid]
		if err == nil {
			delete(m.orphanErrs, uid)
		} else {
			m.orphanErrs[uid] = err.Error()
		}
		m.mu.Unlock()
		switch {
		case err == nil:
		case !seen || last != err.Error():
			klog.FromContext(ctx).Error(err, "Orphaned pod found, but its volumes could not be cleaned up", "podUID", uid)
		default:
			// The same error every CleanupPeriod: logged once.
			klog.FromContext(ctx).V(4).Info("Orphaned pod still not cleaned up", "podUID", uid, "err", err)
		}
	}
	// Forget the errors of orphans gone from disk.
	m.mu.Lock()
	for uid := range m.orphanErrs {
		if !slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() == string(uid) }) {
			delete(m.orphanErrs, uid)
		}
	}
	m.mu.Unlock()
	return pending
}

// cleanupOrphan tears down the volumes of an orphaned pod and removes its
// directory, as the kubelet's reconciler and housekeeping do together.
func (m *Manager) cleanupOrphan(ctx context.Context, uid types.UID) error {
	ps := m.lockPod(uid, true)
	defer ps.lock.Unlock()
	m.mu.Lock()
	adopted := ps.pod != nil
	m.mu.Unlock()
	if adopted {
		// MountPod won the race: the pod is not an orphan.
		return nil
	}
	defer m.forgetPod(uid, ps)
	if err := m.tearDownPod(ctx, uid, ps); err != nil {
		return err
	}
	podDir := filepath.Join(m.podsDir, string(uid))
	entries, err := os.ReadDir(podDir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.Name() == "volumes" {
			errs = append(errs, errors.New("volumes subdir was found after it was removed"))
			continue
		}
		if err := removeAllOneFilesystem(m.mounter, filepath.Join(podDir, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		if err := unix.Rmdir(podDir); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", podDir, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Cleaned up orphaned pod", "podUID", uid)
	return nil
}

// tearDownPod tears down the volumes of pod uid the Manager set up and
// those on disk, then removes the pod's volumes, plugins and
// volume-subpaths directories (empty directories only). ps is locked.
func (m *Manager) tearDownPod(ctx context.Context, uid types.UID, ps *podState) error {
	logger := klog.FromContext(ctx)
	podDir := filepath.Join(m.podsDir, string(uid))
	type job struct {
		vc     *VolumeContext
		plugin Plugin
	}
	var jobs []job
	done := map[diskVolume]bool{}
	m.mu.Lock()
	for name, vs := range ps.volumes {
		if vs.plugin == nil {
			// A claim never resolved: nothing was set up.
			delete(ps.volumes, name)
			continue
		}
		vc := m.stateContext(uid, vs)
		vc.Pod = ps.pod
		jobs = append(jobs, job{vc, vs.plugin})
		done[diskVolume{vs.plugin.Name(), vs.name}] = true
	}
	m.mu.Unlock()
	onDisk, err := volumesOnDisk(podDir)
	if err != nil {
		return err
	}
	var errs []error
	for _, v := range onDisk {
		if done[v] {
			continue
		}
		if p := m.byName[v.plugin]; p != nil {
			jobs = append(jobs, job{m.volumeContext(uid, v.name, p), p})
			continue
		}
		// A volume of a plugin this Manager does not have: never touch
		// its content, remove its directory only if it is empty.
		dir := filepath.Join(podDir, "volumes", escapePluginName(v.plugin), v.name)
		if err := removeDirsOneFilesystem(m.mounter, dir); err != nil {
			errs = append(errs, fmt.Errorf("volume %s of unknown plugin %s: %w", v.name, v.plugin, err))
		}
	}
	// The subPath bind mounts of volumes that have no directory of their
	// own under volumes/ (hostPath), or whose plugin is gone, are not
	// among the jobs when the Manager did not mount the pod since it
	// started: unmount them too, or volume-subpaths/ can never go.
	jobNames := map[string]bool{}
	for _, j := range jobs {
		jobNames[j.vc.Name] = true
	}
	subPathVols, err := os.ReadDir(filepath.Join(podDir, subPathDirName))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, e := range subPathVols {
		if !e.IsDir() || jobNames[e.Name()] {
			continue
		}
		if err := cleanSubPaths(m.mounter, podDir, e.Name()); err != nil {
			errs = append(errs, fmt.Errorf("volume %s: %w", e.Name(), err))
		}
	}
	for _, j := range jobs {
		// Subpaths are under the pod volume's name, not the PV's.
		subPathName := j.vc.Name
		if j.vc.Volume != nil {
			subPathName = j.vc.Volume.Name
		}
		if err := cleanSubPaths(m.mounter, podDir, subPathName); err != nil {
			errs = append(errs, fmt.Errorf("volume %s: %w", j.vc.Name, err))
			continue
		}
		start := m.clock.Now()
		err := j.plugin.TearDown(ctx, j.vc)
		m.metrics.observe(j.plugin.Name(), opUnmount, err, m.clock.Since(start))
		if err != nil {
			errs = append(errs, fmt.Errorf("UnmountVolume.TearDown failed for volume %q: %w", j.vc.Name, err))
			continue
		}
		logger.V(3).Info("UnmountVolume.TearDown succeeded", "podUID", uid, "volume", j.vc.Name)
		m.mu.Lock()
		if j.vc.Volume != nil {
			if vs := ps.volumes[j.vc.Volume.Name]; vs != nil && vs.plugin == j.plugin {
				delete(ps.volumes, j.vc.Volume.Name)
			}
		}
		if f := m.found[uid]; f != nil {
			delete(f, j.vc.Name)
		}
		m.mu.Unlock()
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// What is left are empty directories, or files a plugin did not remove
	// (then this fails and nothing is lost).
	for _, d := range []string{subPathDirName, "volumes", "plugins"} {
		if err := removeDirsOneFilesystem(m.mounter, filepath.Join(podDir, d)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeAllOneFilesystem removes path and everything under it, refusing
// to delete through a mount point: it fails when anything is mounted on or
// under path (the mount table, resolved symlinks) or a directory on the
// way is on another filesystem.
func removeAllOneFilesystem(mounter mount.Interface, path string) error {
	if err := noMountsUnder(mounter, path); err != nil {
		return err
	}
	return removeAllCommon(mounter, path, os.Remove)
}

// removeDirsOneFilesystem removes path and the directories under it, and
// fails on any file or mount point.
func removeDirsOneFilesystem(mounter mount.Interface, path string) error {
	if err := noMountsUnder(mounter, path); err != nil {
		return err
	}
	return removeAllCommon(mounter, path, unix.Rmdir)
}

// noMountsUnder fails when the mount table has a mount point on or under
// path.
func noMountsUnder(mounter mount.Interface, path string) error {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		real = path
	}
	real = filepath.Clean(real)
	mps, err := mounter.List()
	if err != nil {
		return fmt.Errorf("list mount points: %w", err)
	}
	for _, mp := range mps {
		if mp.Path == real || strings.HasPrefix(mp.Path, real+string(os.PathSeparator)) {
			return fmt.Errorf("cannot delete directory %s: %s is a mount point", path, mp.Path)
		}
	}
	return nil
}

// removeAllCommon is the kubelet's RemoveAllOneFilesystemCommon: remove
// path with remove, recursing into directories unless one is a mount
// point.
func removeAllCommon(mounter mount.Interface, path string, remove func(string) error) error {
	err := remove(path)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	fi, serr := os.Lstat(path)
	if serr != nil {
		var pe *os.PathError
		if errors.As(serr, &pe) && (errors.Is(pe.Err, fs.ErrNotExist) || errors.Is(pe.Err, unix.ENOTDIR)) {
			return nil
		}
		return serr
	}
	if !fi.IsDir() {
		return err
	}
	notMnt, merr := mounter.IsLikelyNotMountPoint(path)
	if merr != nil {
		return merr
	}
	if !notMnt {
		return fmt.Errorf("cannot delete directory %s: it is a mount point", path)
	}
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	var first error
	for {
		names, rerr := f.Readdirnames(100)
		for _, name := range names {
			if err := removeAllCommon(mounter, filepath.Join(path, name), remove); err != nil && first == nil {
				first = err
			}
		}
		if rerr == io.EOF || len(names) == 0 {
			break
		}
		if rerr != nil {
			if first == nil {
				first = rerr
			}
			break
		}
	}
	f.Close()
	if err := remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		if first == nil {
			first = err
		}
	}
	return first
}
