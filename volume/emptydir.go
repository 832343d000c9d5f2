package volume

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	"k8s.io/mount-utils"
)

// emptyDirPerm is an emptyDir's mode: any container user may write to it.
const emptyDirPerm os.FileMode = 0o777

// readyFileName marks a set-up emptyDir in its plugin directory.
const readyFileName = "ready"

// emptyDirPlugin sets up emptyDir volumes: a directory in the pod's
// directory, or a tmpfs mounted there for medium Memory (sized by
// sizeLimit, the pod's memory limit or the node's allocatable memory,
// whichever is smallest, as the kubelet).
type emptyDirPlugin struct {
	noswap func() bool
}

func (*emptyDirPlugin) Name() string { return PluginEmptyDir }

func (*emptyDirPlugin) CanSupport(vol *v1.Volume) bool { return vol.EmptyDir != nil }

func (p *emptyDirPlugin) SetUp(ctx context.Context, vc *VolumeContext) (Mounted, error) {
	src := vc.Volume.EmptyDir
	if src.Mode != nil {
		klog.FromContext(ctx).V(2).Info("Ignoring emptyDir mode: the EmptyDirVolumeMode feature (alpha, off by default in the kubelet) is not implemented",
			"pod", klog.KObj(vc.Pod), "volume", vc.Name)
	}
	var size int64
	switch src.Medium {
	case v1.StorageMediumDefault:
	case v1.StorageMediumMemory:
		size = memoryVolumeSize(vc.Host.NodeAllocatable(), vc.Pod, src.SizeLimit)
	default:
		return Mounted{}, fmt.Errorf("unknown storage medium %q (hugepages media are not supported by this node agent)", src.Medium)
	}
	err := setUpEmptyDir(ctx, vc.Host.Mounter(), vc.Path, filepath.Join(vc.PluginDir, vc.Name), src.Medium, size, vc.FSGroup, p.noswap)
	if err != nil {
		return Mounted{}, err
	}
	return Mounted{Path: vc.Path, SELinuxRelabel: true}, nil
}

func (*emptyDirPlugin) TearDown(ctx context.Context, vc *VolumeContext) error {
	return tearDownEmptyDir(ctx, vc.Host.Mounter(), vc.Path, filepath.Join(vc.PluginDir, vc.Name))
}

// wrappedReadyDir is where the emptyDir a configMap, secret, downwardAPI
// or projected volume is built on keeps its ready file, as the kubelet's
// wrapper volumes: plugins/kubernetes.io~empty-dir/wrapped_<name>.
func wrappedReadyDir(vc *VolumeContext) string {
	return filepath.Join(filepath.Dir(vc.PluginDir), escapePluginName(PluginEmptyDir), "wrapped_"+vc.Name)
}

// setUpEmptyDir makes dir an emptyDir of medium (a tmpfs of size bytes,
// 0 meaning the kernel's default, for Memory), owned by fsGroup, and marks
// it ready in readyDir. A volume already ready is left alone.
func setUpEmptyDir(ctx context.Context, mounter mount.Interface, dir, readyDir string, medium v1.StorageMedium, size int64, fsGroup *int64, noswap func() bool) error {
	notMnt, err := mounter.IsLikelyNotMountPoint(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if isReady(readyDir) {
		if medium == v1.StorageMediumMemory && !notMnt {
			return nil
		}
		if medium == v1.StorageMediumDefault {
			if _, err := os.Stat(dir); err == nil {
				return nil
			}
			klog.FromContext(ctx).Info("Volume ready file exists but the volume directory does not; setting it up again", "dir", dir)
			if err := os.RemoveAll(readyDir); err != nil {
				return err
			}
		}
	}
	switch medium {
	case v1.StorageMediumMemory:
		err = setUpTmpfs(ctx, mounter, dir, size, noswap)
	default:
		err = setUpDir(dir)
	}
	// Ownership failures are logged by nobody and ignored, as the kubelet.
	_ = SetVolumeOwnership(dir, fsGroup, false)
	if err != nil {
		return err
	}
	return setReady(readyDir)
}

// setUpDir creates dir with mode 0777 whatever the umask.
func setUpDir(dir string) error {
	if err := os.MkdirAll(dir, emptyDirPerm); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if fi.Mode().Perm() != emptyDirPerm {
		return os.Chmod(dir, emptyDirPerm)
	}
	return nil
}

// setUpTmpfs mounts a tmpfs at dir unless one is mounted there already.
func setUpTmpfs(ctx context.Context, mounter mount.Interface, dir string, size int64, noswap func() bool) error {
	if err := setUpDir(dir); err != nil {
		return err
	}
	notMnt, err := mounter.IsLikelyNotMountPoint(dir)
	if err != nil {
		return err
	}
	if !notMnt {
		return nil
	}
	var opts []string
	if size > 0 {
		opts = append(opts, fmt.Sprintf("size=%d", size))
	}
	if noswap != nil && noswap() {
		opts = append(opts, "noswap")
	}
	klog.FromContext(ctx).V(3).Info("Mounting tmpfs", "dir", dir, "options", opts)
	return mounter.MountSensitiveWithoutSystemd("tmpfs", dir, "tmpfs", opts, nil)
}

// tearDownEmptyDir unmounts dir when it is a mount point and removes it,
// never deleting through a mount point, and removes its ready file.
func tearDownEmptyDir(ctx context.Context, mounter mount.Interface, dir, readyDir string) error {
	if err := os.RemoveAll(readyDir); err != nil {
		return fmt.Errorf("failed to remove ready dir [%s]: %w", readyDir, err)
	}
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err := unmountIfMounted(ctx, mounter, dir); err != nil {
		return err
	}
	return removeAllOneFilesystem(mounter, dir)
}

// unmountIfMounted unmounts dir when something is mounted on it and checks
// that nothing is left mounted there.
func unmountIfMounted(ctx context.Context, mounter mount.Interface, dir string) error {
	mounted, err := isMountPoint(mounter, dir)
	if err != nil {
		return err
	}
	if !mounted {
		return nil
	}
	klog.FromContext(ctx).V(3).Info("Unmounting", "dir", dir)
	if err := mounter.Unmount(dir); err != nil {
		return err
	}
	if mounted, err = isMountPoint(mounter, dir); err != nil {
		return err
	} else if mounted {
		return fmt.Errorf("%s is still a mount point after unmounting it", dir)
	}
	return nil
}

// isMountPoint reports whether something is mounted on path: another
// filesystem (cheap) or a bind mount (the mount table).
func isMountPoint(mounter mount.Interface, path string) (bool, error) {
	notMnt, err := mounter.IsLikelyNotMountPoint(path)
	if err != nil {
		return false, err
	}
	if !notMnt {
		return true, nil
	}
	return mounter.IsMountPoint(path)
}

func isReady(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, readyFileName))
	return err == nil && fi.Mode().IsRegular()
}

func setReady(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, readyFileName))
	if err != nil {
		return err
	}
	return f.Close()
}

// memoryVolumeSize is the size of a memory-backed volume, the kubelet's:
// the node's allocatable memory, less when the pod's memory limit is
// smaller, less again when sizeLimit is smaller. 0 means unknown (the
// kernel's default, half the RAM).
func memoryVolumeSize(allocatable v1.ResourceList, pod *v1.Pod, sizeLimit *resource.Quantity) int64 {
	size := allocatable.Memory().Value()
	if limit := podMemoryLimit(pod); limit > 0 && (size == 0 || limit <= size) {
		size = limit
	}
	if sizeLimit != nil {
		if v := sizeLimit.Value(); v > 0 && (size == 0 || v <= size) {
			size = v
		}
	}
	return size
}

// podMemoryLimit is the pod's memory limit as its cgroup gets it: set only
// when every container declares one, or at pod level; 0 otherwise.
func podMemoryLimit(pod *v1.Pod) int64 {
	declared := true
	for _, cs := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if cs[i].Resources.Limits.Memory().IsZero() {
				declared = false
			}
		}
	}
	if pod.Spec.Resources != nil && !pod.Spec.Resources.Limits.Memory().IsZero() {
		declared = true
	}
	if !declared {
		return 0
	}
	limits := resourcehelper.PodLimits(pod, resourcehelper.PodResourcesOptions{})
	return limits.Memory().Value()
}
