package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/e2e/bench"
	"github.com/nodekit/nodekit/e2e/cluster"
	"github.com/nodekit/nodekit/e2e/csidriver"
)

// csiDriverName is the name the e2e CSI driver registers under in a
// nodebench run, its CSIDriver object's and its PVs'.
const csiDriverName = "csi.nodebench.nodekit.io"

// csiNamespace holds the pods and claims of the CSI burst.
const csiNamespace = "nodebench-csi"

// csiFigures are the CSI burst's samples, one per pod: the pod seen bound
// by a watching client, the driver's NodePublishVolume of its volume
// returning, the pod seen Running.
type csiFigures struct {
	boundToPublished, publishedToRunning, boundToRunning []time.Duration
}

// csiPod is what the CSI burst's watch learned of one pod.
type csiPod struct {
	volume         string // its PV's volume handle
	bound, running time.Time
}

// csiBurst runs the e2e module's CSI driver (package csidriver) in this
// process for n, registered through n's plugins_registry as
// node-driver-registrar does, creates -csi-pods static PVs of it each
// pre-bound to a claim, then one pod per claim at once, and records per
// pod bound → volume published → Running. Everything it made is deleted
// before it returns.
func (b *benchmark) csiBurst(ctx context.Context, n *node) (err error) {
	pods := b.opts.csiPods
	b.logf("CSI burst: %d pods with a CSI volume each on %s", pods, n.agent.Name)
	d := csidriver.New(csidriver.Options{
		Name:            csiDriverName,
		NodeID:          n.agent.Name + "-csi",
		DataRoot:        filepath.Join(n.agent.Dir, "csi-data"),
		Endpoint:        filepath.Join(n.agent.Dir, "csi.sock"),
		RegistrationDir: filepath.Join(n.agent.Dir, "root", "plugins_registry"),
	})
	if err := d.Start(); err != nil {
		return fmt.Errorf("CSI driver %s for node %s: %w", csiDriverName, n.agent.Name, err)
	}
	// Deferred first, so it runs last: the agent unpublishes and
	// unstages the pods' volumes through it.
	defer d.Stop()
	select {
	case s := <-d.Statuses():
		if !s.PluginRegistered {
			return fmt.Errorf("node %s refused CSI driver %s: %s", n.agent.Name, csiDriverName, s.Error)
		}
	case <-time.After(readyTimeout):
		return fmt.Errorf("node %s did not answer CSI driver %s's registration within %s", n.agent.Name, csiDriverName, readyTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}

	cleanup := context.WithoutCancel(ctx)
	storage, core := b.client.StorageV1(), b.client.CoreV1()
	_, err = storage.CSIDrivers().Create(ctx, &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: csiDriverName},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired:       ptr.To(false),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent},
		},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create CSIDriver %s: %w", csiDriverName, err)
	}
	defer func() {
		err = errors.Join(err, ignoreNotFound(storage.CSIDrivers().Delete(cleanup, csiDriverName, metav1.DeleteOptions{})))
	}()
	if err := bench.WaitForNamespace(ctx, b.client, csiNamespace); err != nil {
		return err
	}

	state := make(map[string]*csiPod, pods)
	names := make([]string, pods)
	for i := range names {
		names[i] = fmt.Sprintf("csi-%03d", i)
		state[names[i]] = &csiPod{volume: fmt.Sprintf("nodebench-csi-%03d", i)}
	}
	// Static PVs pre-bound to their claims (both sides named): the PV
	// controller only confirms the binding.
	defer func() {
		for _, name := range names {
			err = errors.Join(err,
				ignoreNotFound(core.PersistentVolumeClaims(csiNamespace).Delete(cleanup, name, metav1.DeleteOptions{})),
				ignoreNotFound(core.PersistentVolumes().Delete(cleanup, state[name].volume, metav1.DeleteOptions{})))
		}
	}()
	for _, name := range names {
		if err := createCSIClaim(ctx, b, name, state[name].volume); err != nil {
			return err
		}
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, readyTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := core.PersistentVolumeClaims(csiNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		bound := 0
		for _, c := range list.Items {
			if c.Status.Phase == v1.ClaimBound {
				bound++
			}
		}
		return bound == pods, nil
	})
	if err != nil {
		return fmt.Errorf("%d claims of %s in namespace %s bound: %w", pods, csiDriverName, csiNamespace, err)
	}

	defer func() { err = errors.Join(err, bench.DeletePods(cleanup, b.client, csiNamespace, deleteTimeout)) }()
	ctx, cancel := context.WithTimeout(ctx, burstTimeout)
	defer cancel()
	list, err := core.Pods(csiNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list pods in %s: %w", csiNamespace, err)
	}
	w, err := core.Pods(csiNamespace).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		return fmt.Errorf("watch pods in %s: %w", csiNamespace, err)
	}
	defer w.Stop()
	createErrs := make(chan error, pods)
	for _, name := range names {
		go func() {
			_, err := core.Pods(csiNamespace).Create(ctx, csiPodSpec(name, n.agent.Name), metav1.CreateOptions{})
			if err != nil {
				err = fmt.Errorf("CSI burst: create pod %s/%s: %w", csiNamespace, name, err)
			}
			createErrs <- err
		}()
	}
	running, creating := 0, pods
	for running < pods || creating > 0 {
		select {
		case err := <-createErrs:
			creating--
			if err != nil {
				return err
			}
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("CSI burst: %d of %d pods Running: the watch of pods in %s ended", running, pods, csiNamespace)
			}
			now := time.Now()
			pod, isPod := ev.Object.(*v1.Pod)
			if !isPod || state[pod.Name] == nil {
				continue
			}
			st := state[pod.Name]
			if st.bound.IsZero() && pod.Spec.NodeName != "" {
				st.bound = now
			}
			switch {
			case pod.Status.Phase == v1.PodFailed:
				return fmt.Errorf("CSI burst: pod %s/%s failed: %s: %s", csiNamespace, pod.Name, pod.Status.Reason, pod.Status.Message)
			case pod.Status.Phase == v1.PodRunning && st.running.IsZero():
				st.running = now
				running++
			}
		case <-ctx.Done():
			return fmt.Errorf("CSI burst: %d of %d pods Running on %s within %s: %w", running, pods, n.agent.Name, burstTimeout, ctx.Err())
		}
	}
	f := &csiFigures{}
	for _, name := range names {
		st := state[name]
		published := d.Published(st.volume)
		if published.IsZero() {
			return fmt.Errorf("CSI burst: pod %s/%s runs but driver %s never published its volume %s", csiNamespace, name, csiDriverName, st.volume)
		}
		f.boundToPublished = append(f.boundToPublished, published.Sub(st.bound))
		f.publishedToRunning = append(f.publishedToRunning, st.running.Sub(published))
		f.boundToRunning = append(f.boundToRunning, st.running.Sub(st.bound))
	}
	b.csi = f
	b.logf("CSI burst on %s: bound → published %s, published → Running %s, bound → Running %s", n.agent.Name,
		bench.Summarize(f.boundToPublished), bench.Summarize(f.publishedToRunning), bench.Summarize(f.boundToRunning))
	return nil
}

// createCSIClaim creates the PV volume of the benchmark's CSI driver (1Gi,
// ReadWriteOnce, retained) and the claim name bound to it, both naming the
// other.
func createCSIClaim(ctx context.Context, b *benchmark, name, volume string) error {
	class := "nodebench-csi"
	size := v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}
	modes := []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}
	_, err := b.client.CoreV1().PersistentVolumes().Create(ctx, &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: volume},
		Spec: v1.PersistentVolumeSpec{
			Capacity: size, AccessModes: modes, StorageClassName: class,
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource: v1.PersistentVolumeSource{CSI: &v1.CSIPersistentVolumeSource{
				Driver: csiDriverName, VolumeHandle: volume}},
			ClaimRef: &v1.ObjectReference{Namespace: csiNamespace, Name: name},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create PV %s: %w", volume, err)
	}
	_, err = b.client.CoreV1().PersistentVolumeClaims(csiNamespace).Create(ctx, &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: csiNamespace},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes: modes, StorageClassName: &class, VolumeName: volume,
			Resources: v1.VolumeResourceRequirements{Requests: size},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create PVC %s/%s: %w", csiNamespace, name, err)
	}
	return nil
}

// csiPodSpec is the burst's pod (bench's: BestEffort, busybox sleeping,
// no service account token, pinned to the node by a nodeSelector) with
// its claim of the same name mounted on /data.
func csiPodSpec(name, node string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: csiNamespace, Labels: map[string]string{"app": "nodebench-csi"}},
		Spec: v1.PodSpec{
			NodeSelector:                  map[string]string{v1.LabelHostname: node},
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []v1.Container{{
				Name:            "sleep",
				Image:           cluster.BusyboxImage,
				Command:         []string{"sleep", "3600"},
				ImagePullPolicy: v1.PullIfNotPresent,
				VolumeMounts:    []v1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
				PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}},
		},
	}
}

// ignoreNotFound is err unless it says the object is gone.
func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
