package volume

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// defaultFileMode is the API's default defaultMode of configMap, secret,
// downwardAPI and projected volumes, used when a pod that skipped API
// defaulting (a static pod) leaves it unset.
const defaultFileMode int32 = 0o644

// fileMode returns *m, or the API default when m is nil.
func fileMode(m *int32) int32 {
	if m == nil {
		return defaultFileMode
	}
	return *m
}

// atomicVolume is what the configMap, secret, downwardAPI and projected
// plugins share: an emptyDir (a tmpfs for medium Memory) holding files the
// AtomicWriter writes.
type atomicVolume struct {
	medium v1.StorageMedium
	noswap func() bool
}

// setUp writes payload into vc's volume, setting the volume up first.
func (a *atomicVolume) setUp(ctx context.Context, vc *VolumeContext, payload map[string]FileProjection) (Mounted, error) {
	if usesUserFields(vc.Volume) {
		klog.FromContext(ctx).V(2).Info("Ignoring defaultUser and user: the AtomicWriteVolumeUserFields feature (alpha, off by default in the kubelet) is not implemented",
			"pod", klog.KObj(vc.Pod), "volume", vc.Name)
	}
	_, statErr := os.Lstat(filepath.Join(vc.Path, dataDirName))
	firstWrite := errors.Is(statErr, fs.ErrNotExist)
	var size int64
	if a.medium == v1.StorageMediumMemory {
		size = memoryVolumeSize(vc.Host.NodeAllocatable(), vc.Pod, nil)
	}
	if err := setUpEmptyDir(ctx, vc.Host.Mounter(), vc.Path, wrappedReadyDir(vc), a.medium, size, vc.FSGroup, a.noswap); err != nil {
		return Mounted{}, err
	}
	if err := makeNestedMountpoints(vc.Name, vc.Path, vc.Pod); err != nil {
		return Mounted{}, err
	}
	err := a.write(ctx, vc, payload)
	if err != nil && firstWrite {
		// Do not leave a half-written volume behind, as the kubelet; a
		// volume containers already use keeps its previous content.
		if terr := a.tearDown(ctx, vc); terr != nil {
			klog.FromContext(ctx).Error(terr, "Failed to clean up after a failed setup", "volume", vc.Name, "podUID", vc.PodUID)
		}
	}
	if err != nil {
		return Mounted{}, err
	}
	return Mounted{Path: vc.Path, ReadOnly: true, SELinuxRelabel: true}, nil
}

func (a *atomicVolume) write(ctx context.Context, vc *VolumeContext, payload map[string]FileProjection) error {
	w, err := NewAtomicWriter(vc.Path, fmt.Sprintf("pod %s/%s volume %s", vc.Pod.Namespace, vc.Pod.Name, vc.Name))
	if err != nil {
		return err
	}
	return w.Write(ctx, payload, func(string) error {
		// New files may be outside the timestamped directory on the
		// first write: the whole volume, as the kubelet.
		return SetVolumeOwnership(vc.Path, vc.FSGroup, true)
	})
}

func (a *atomicVolume) tearDown(ctx context.Context, vc *VolumeContext) error {
	return tearDownEmptyDir(ctx, vc.Host.Mounter(), vc.Path, wrappedReadyDir(vc))
}

// RequiresRemount is true: the files follow their sources.
func (a *atomicVolume) RequiresRemount(*VolumeContext) bool { return true }

// makeNestedMountpoints creates in dir the directories where containers
// mount other volumes inside volume name (they cannot be created later in
// a read-only volume), as the kubelet.
func makeNestedMountpoints(name, dir string, pod *v1.Pod) error {
	dirs, err := nestedMountpoints(name, pod)
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("unable to create nested volume mountpoints: %w", err)
		}
	}
	return nil
}

// nestedMountpoints returns, relative to volume name's mount path, the
// mount paths of other mounts directly beneath it in any container.
func nestedMountpoints(name string, pod *v1.Pod) ([]string, error) {
	var out []string
	check := func(c *v1.Container) error {
		var all, mine []string
		for _, m := range c.VolumeMounts {
			p := filepath.Clean(m.MountPath)
			all = append(all, p)
			if m.Name == name {
				mine = append(mine, p)
			}
		}
		slices.Sort(all)
		for _, mp := range mine {
			if strings.HasPrefix(mp, ".."+string(os.PathSeparator)) {
				return fmt.Errorf("invalid container mount point %v", mp)
			}
			prefix := mp + string(os.PathSeparator)
			var nested []string
			for _, other := range all {
				if !strings.HasPrefix(other, prefix) {
					continue
				}
				if slices.ContainsFunc(nested, func(n string) bool { return strings.HasPrefix(other, n) }) {
					continue
				}
				nested = append(nested, other+string(os.PathSeparator))
				out = append(out, other[len(prefix):])
			}
		}
		return nil
	}
	var err error
	visitContainers(pod, func(c *v1.Container) bool {
		err = check(c)
		return err == nil
	})
	return out, err
}

// visitContainers calls fn for every init, regular and ephemeral container
// of pod until it returns false.
func visitContainers(pod *v1.Pod, fn func(*v1.Container) bool) {
	for i := range pod.Spec.InitContainers {
		if !fn(&pod.Spec.InitContainers[i]) {
			return
		}
	}
	for i := range pod.Spec.Containers {
		if !fn(&pod.Spec.Containers[i]) {
			return
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if !fn((*v1.Container)(&pod.Spec.EphemeralContainers[i].EphemeralContainerCommon)) {
			return
		}
	}
}

// usesUserFields reports whether vol sets the alpha defaultUser or user
// fields of configMap, secret, downwardAPI and projected volumes.
func usesUserFields(vol *v1.Volume) bool {
	items := func(ks []v1.KeyToPath) bool {
		return slices.ContainsFunc(ks, func(k v1.KeyToPath) bool { return k.User != nil })
	}
	files := func(fs []v1.DownwardAPIVolumeFile) bool {
		return slices.ContainsFunc(fs, func(f v1.DownwardAPIVolumeFile) bool { return f.User != nil })
	}
	switch s := vol.VolumeSource; {
	case s.ConfigMap != nil:
		return s.ConfigMap.DefaultUser != nil || items(s.ConfigMap.Items)
	case s.Secret != nil:
		return s.Secret.DefaultUser != nil || items(s.Secret.Items)
	case s.DownwardAPI != nil:
		return s.DownwardAPI.DefaultUser != nil || files(s.DownwardAPI.Items)
	case s.Projected != nil:
		if s.Projected.DefaultUser != nil {
			return true
		}
		for _, p := range s.Projected.Sources {
			switch {
			case p.ConfigMap != nil && items(p.ConfigMap.Items),
				p.Secret != nil && items(p.Secret.Items),
				p.DownwardAPI != nil && files(p.DownwardAPI.Items),
				p.ServiceAccountToken != nil && p.ServiceAccountToken.User != nil:
				return true
			}
		}
	}
	return false
}
