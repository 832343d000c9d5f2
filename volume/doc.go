// Package volume is the node agent's volume manager: it sets up the
// volumes of the node's pods before their containers start and tears them
// down after, as the kubelet's volume manager (pkg/kubelet/volumemanager)
// and its in-tree plugins do, for the volume kinds that need no storage
// driver: emptyDir, hostPath, configMap, secret, downwardAPI and projected
// (configMaps, secrets, the downward API and service-account tokens), and
// persistentVolumeClaims bound to hostPath and local PVs; plugins add more
// (volume/csi: CSI PVs and inline volumes).
//
// # Use
//
// A Manager is built with New and runs its reconciler with Run. The pod
// lifecycle loop calls, for each pod:
//
//   - MountPod(ctx, pod) on every sync, before creating containers. It sets
//     up every volume a container mounts (volumes no container uses are
//     ignored, as by the kubelet) and returns them by name as Mounted: the
//     host path the runtime bind-mounts, whether every mount of it must be
//     read-only (configMap, secret, downwardAPI, projected) and whether to
//     ask for SELinux relabeling (all but hostPath). It is cheap once the
//     volumes are set up. On failure it returns an error naming each volume
//     and why, and the pod's containers must not start.
//   - SubPath(ctx, spec) for each volumeMount with a subPath or an expanded
//     subPathExpr: the path the runtime mounts instead of the volume (a
//     bind mount of the subPath, safe from symlink tricks).
//   - UnmountPod(ctx, uid) once no container of the pod runs any more.
//
// Run rewrites configMap, secret, downwardAPI and projected volumes in
// place when their sources change (a watch per referenced object, as the
// kubelet's watch-based managers; the pod's own changes through MountPod)
// and every ResyncPeriod, which also refreshes service-account tokens. It
// also removes the volumes of pods found on disk that the agent does not
// know (see Options.PodKnown), never deleting through a mount point.
//
// # On disk
//
// The layout is the kubelet's, so tools and a kubelet started on the same
// root directory see the same files:
//
//	<root>/pods/<uid>/volumes/kubernetes.io~empty-dir/<name>     emptyDir (tmpfs for medium Memory)
//	<root>/pods/<uid>/volumes/kubernetes.io~configmap/<name>     on the node's disk
//	<root>/pods/<uid>/volumes/kubernetes.io~secret/<name>        tmpfs
//	<root>/pods/<uid>/volumes/kubernetes.io~downward-api/<name>  tmpfs
//	<root>/pods/<uid>/volumes/kubernetes.io~projected/<name>     tmpfs
//	<root>/pods/<uid>/volumes/kubernetes.io~local-volume/<pv>    bind mount of a local PV's path
//	<root>/pods/<uid>/plugins/kubernetes.io~empty-dir/[wrapped_]<name>/ready
//	<root>/pods/<uid>/volume-subpaths/<volume>/<container>/<index>  subPath bind mounts
//
// hostPath volumes are the node's own paths, checked against their type
// with the kubelet's error texts (CheckHostPath). Files of configMap,
// secret, downwardAPI and projected volumes are written by an
// AtomicWriter: a timestamped directory, a ..data symlink to it swapped
// atomically, and visible symlinks into ..data. Memory-backed volumes are
// tmpfs mounts sized by the emptyDir's sizeLimit, the pod's memory limit
// or the node's allocatable memory, whichever is smallest, with noswap
// where the kernel has it. The pod's fsGroup owns the files of every
// volume but hostPath (SetVolumeOwnership); a service-account token is
// mode 0600 (0640 after the fsGroup change) when the pod sets an fsGroup
// or all its containers run as one user, who then owns it.
//
// # Persistent volumes
//
// A persistentVolumeClaim, and a generic ephemeral volume (the claim
// <pod>-<volume> the ephemeral-volume controller creates, which must be
// owned by the pod), is resolved to its bound PersistentVolume with the
// kubelet's checks and words: "error processing PVC <ns>/<claim>: PVC is
// not bound" (or being deleted, or its PV missing or bound to another
// claim) is retried every few seconds at most and reported in the summary
// event after the pod's timeout, as the kubelet's. The PV's node affinity
// is checked against Options.NodeLabels ("MountVolume.NodeAffinity check
// failed for volume <pv> : ..."), then the one plugin implementing
// PersistentVolumePlugin that supports it mounts it, seeing the PV, the
// claim and the claim's readOnly in VolumeContext; the volume's name (and
// directory) is the PV's. Built in: hostPath PVs (the path itself) and
// local PVs (a bind mount on kubernetes.io~local-volume/<pv>, read-only
// when the claim says so, with the PV's mountOptions). CSI PVs and inline
// CSI volumes are volume/csi's Plugin, added by the agent. Every
// ResyncPeriod the claims of mounted volumes of Expander plugins are read
// and a claim the resizer left to the node (NodeResizePending) is expanded
// online and its status updated as by the kubelet. A PV of
// volumeMode Block is refused: mounted with volumeMounts, in the kubelet's
// words; used through volumeDevices, "raw block volumes (volumeDevices)
// are not supported by this node agent", at once.
//
// # Not supported
//
// Image volumes are the built-in kubernetes.io/image plugin's, as the
// kubelet's: nothing is set up on the node; MountPod returns them
// read-only without a path, and the runtime package pulls the image and
// has the runtime mount it (the CRI Mount's image).
//
// Volumes that need a storage driver nodekit does not have (nfs, iscsi
// and every other in-tree kind, as pod volumes or PVs) fail loudly:
// MountPod's error and a FailedMount event say "failed to get Plugin from
// volumeSpec for volume "x" err=no volume plugin matched: <kind> volumes
// are not supported by this node agent".
// So do emptyDir media HugePages*, and clusterTrustBundle and
// podCertificate projections. Alpha fields the kubelet ignores with its
// default feature gates (emptyDir mode, defaultUser and the items' user)
// are ignored, with a log line. The Manager measures no volume usage (du,
// inodes): stats.VolumeUsage does, from the on-disk layout below, for the
// stats summary and the eviction manager (agent.VolumeStats). There is no
// fsGroupChangePolicy: ownership is always applied recursively, as the
// kubelet does for these kinds.
//
// # Events
//
// MountPod records FailedMount Warning events on the pod in the kubelet's
// words: "MountVolume.SetUp failed for volume "x" : <reason>" for each
// failed setup (the reconciler's remounts too), retried with the
// kubelet's back-off (500 ms doubling to 2m2s, lifted when a configMap or
// secret the pod uses changes), and "Unable to attach or mount volumes:
// unmounted volumes=[...], unattached volumes=[...], failed to process
// volumes=[...]: <reasons>" when a volume has no plugin, or after the pod
// has waited for its volumes for 2m3s (the kubelet's timeout), then every
// 2m3s. The caller records no event of its own for MountPod's errors.
//
// # Node status
//
// VolumesInUse reports the volumes of plugins implementing InUseReporter
// (the kubelet reports attachable volumes only: none of the built-in
// plugins, CSI volumes whose driver requires attachment); ReconcilerSynced tells when Run has read the volumes on disk,
// after which the node status reports status.volumesInUse.
//
// # Metrics
//
// Registered on Options.Registerer, with the kubelet's names:
//
//   - volume_manager_total_volumes{plugin_name,state} (gauge): the volumes
//     of the pods MountPod was called for (state desired_state_of_world;
//     plugin_name "N/A" for volumes without a plugin) and those set up or
//     found on disk (actual_state_of_world).
//   - storage_operation_duration_seconds{volume_plugin,operation_name,
//     status,migrated} (histogram): each SetUp (volume_mount, remounts
//     included) and TearDown (volume_unmount), status success or
//     fail-unknown, migrated always false.
//
// # Swapping pieces
//
// A volume kind is a Plugin: Name (the kubelet's qualified plugin name,
// which names its directory), CanSupport, SetUp and TearDown, plus the
// optional Remounter and InUseReporter. Exactly one plugin must support a
// volume. Without fx, pass plugins in Options.Plugins; with fx, add them to
// the value group PluginGroup with AsPlugin:
//
//	volume.AsPlugin(newMyPlugin)
//
// A plugin whose Name is a built-in plugin's (PluginEmptyDir, ...)
// replaces it. Plugins use the Manager's services through
// VolumeContext.Host (configMaps and secrets through the watches, tokens,
// the mounter) and may write with NewAtomicWriter and SetVolumeOwnership.
// Module takes the rest from the graph: decorate volume.Options to change
// the periods, the mounter or the pod functions.
package volume
