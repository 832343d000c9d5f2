// Package csidriver is the e2e module's own CSI driver, standing in for a
// storage vendor's: a hostPath-style driver written against the CSI spec
// (github.com/container-storage-interface/spec) whose volumes are
// directories under a data root on the node. It serves the CSI Identity
// and Node services on its own unix socket and registers itself with the
// node agent exactly as node-driver-registrar does: by serving the
// pluginregistration v1 Registration service on
// <root-dir>/plugins_registry/<driver>-reg.sock.
//
// Node service: NodeGetInfo (node ID, max volumes per node, the topology
// segment TopologyKey=<node ID>); NodeGetCapabilities STAGE_UNSTAGE_VOLUME,
// GET_VOLUME_STATS and EXPAND_VOLUME; NodeStageVolume bind-mounts the
// volume's directory <data root>/<volume ID> on the staging path;
// NodePublishVolume bind-mounts the staging path on the target path
// (read-only when asked), or for an inline ephemeral volume
// (csi.storage.k8s.io/ephemeral=true) a directory of its own that
// NodeUnpublishVolume deletes; NodeUnpublishVolume and NodeUnstageVolume
// unmount; NodeGetVolumeStats is statfs of the volume path;
// NodeExpandVolume records the size asked for. There is no Controller
// service: tests use static PVs whose volume handle names the directory.
//
// A volume whose context has TmpfsSizeKey (a size in bytes) is a tmpfs of
// that size mounted on the staging path instead of its directory, so that
// a container sees its size (df) and NodeExpandVolume grows it online
// (remount with the new size); its data goes with NodeUnstageVolume.
// FailPublish makes NodePublishVolume of one volume fail with a message,
// standing in for a driver failing a call.
//
// The driver runs in the test process (a host process, as a driver's node
// plugin in a privileged pod would be); Kill stops it the way SIGKILL
// does, leaving its sockets behind, and Start again recovers as a
// restarted driver and registrar do.
package csidriver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/nodekit/nodekit/internal/unixsock"
)

// ephemeralKey is the volume context key the kubelet sets for an inline
// ephemeral volume.
const ephemeralKey = "csi.storage.k8s.io/ephemeral"

// TmpfsSizeKey is the volume context key of a tmpfs-backed volume's size
// in bytes; see the package doc.
const TmpfsSizeKey = "e2e.nodekit.io/tmpfs-size"

// ephemeralMarker, after a volume's directory name, marks an inline
// ephemeral volume, whose data goes with its only publication.
const ephemeralMarker = ".ephemeral"

// Options configure a Driver.
type Options struct {
	// Name is the driver's name (the CSIDriver object's and PVs'
	// spec.csi.driver).
	Name string
	// NodeID is what NodeGetInfo reports, and the value of the topology
	// segment.
	NodeID string
	// TopologyKey is the key of the one topology segment NodeGetInfo
	// reports; empty reports none.
	TopologyKey string
	// MaxVolumesPerNode is NodeGetInfo's limit (0: none).
	MaxVolumesPerNode int64
	// DataRoot holds a directory per volume.
	DataRoot string
	// Endpoint is the path of the CSI socket.
	Endpoint string
	// RegistrationDir is the agent's <root-dir>/plugins_registry.
	RegistrationDir string
}

// Driver is a running (or stopped) CSI driver; see the package doc.
type Driver struct {
	opts Options

	mu       sync.Mutex
	servers  []*grpc.Server
	statuses chan *registerapi.RegistrationStatus
	expanded map[string]int64
	calls    map[string]int
	// failPublish are the messages NodePublishVolume fails with, by
	// volume ID.
	failPublish map[string]string
	// tmpfs are the staging paths of tmpfs-backed volumes, by volume ID.
	tmpfs map[string]string
	// stageContexts are the publish contexts NodeStageVolume was given,
	// by volume ID.
	stageContexts map[string]map[string]string
	// published is when NodePublishVolume last returned success, by
	// volume ID.
	published map[string]time.Time
}

// New returns a stopped driver.
func New(opts Options) *Driver {
	return &Driver{opts: opts, statuses: make(chan *registerapi.RegistrationStatus, 16),
		expanded: map[string]int64{}, calls: map[string]int{}, failPublish: map[string]string{}, tmpfs: map[string]string{},
		stageContexts: map[string]map[string]string{}, published: map[string]time.Time{}}
}

// Published returns when NodePublishVolume of volumeID last returned
// success (this process's clock, taken as the call returns), zero if it
// never did. nodebench times pod bound → volume published → Running
// with it.
func (d *Driver) Published(volumeID string) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.published[volumeID]
}

// StageContext returns the publish context NodeStageVolume of volumeID
// was last given (the VolumeAttachment's attachment metadata), nil if it
// was never staged.
func (d *Driver) StageContext(volumeID string) map[string]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stageContexts[volumeID]
}

// FailPublish makes NodePublishVolume of volumeID fail with msg (gRPC code
// Internal); an empty msg makes it succeed again.
func (d *Driver) FailPublish(volumeID, msg string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if msg == "" {
		delete(d.failPublish, volumeID)
		return
	}
	d.failPublish[volumeID] = msg
}

// RegistrationSocket is the path of the registration socket.
func (d *Driver) RegistrationSocket() string {
	return filepath.Join(d.opts.RegistrationDir, d.opts.Name+"-reg.sock")
}

// Start serves the CSI socket and then the registration socket, removing
// stale ones first as node-driver-registrar does.
func (d *Driver) Start() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.servers) > 0 {
		return errors.New("csidriver: already started")
	}
	if err := os.MkdirAll(d.opts.DataRoot, 0o750); err != nil {
		return err
	}
	csiSrv := grpc.NewServer()
	csipb.RegisterIdentityServer(csiSrv, identity{d: d})
	csipb.RegisterNodeServer(csiSrv, node{d: d})
	regSrv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(regSrv, registration{d: d})
	for _, s := range []struct {
		srv  *grpc.Server
		path string
	}{{csiSrv, d.opts.Endpoint}, {regSrv, d.RegistrationSocket()}} {
		if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		l, err := net.Listen("unix", s.path)
		if err != nil {
			if lerr := unixsock.CheckPath(s.path); lerr != nil {
				err = lerr
			}
			for _, srv := range d.servers {
				srv.Stop()
			}
			d.servers = nil
			return fmt.Errorf("csidriver: listen on %s: %w", s.path, err)
		}
		// As a killed process's: the socket stays until Stop removes it.
		l.(*net.UnixListener).SetUnlinkOnClose(false)
		go func() { _ = s.srv.Serve(l) }()
		d.servers = append(d.servers, s.srv)
	}
	return nil
}

// Kill stops serving as a SIGKILLed driver does: the sockets stay.
func (d *Driver) Kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.servers {
		s.Stop()
	}
	d.servers = nil
}

// Stop stops serving and removes both sockets, which de-registers the
// driver.
func (d *Driver) Stop() {
	d.Kill()
	_ = os.Remove(d.RegistrationSocket())
	_ = os.Remove(d.opts.Endpoint)
}

// Statuses receives every registration status the agent sends.
func (d *Driver) Statuses() <-chan *registerapi.RegistrationStatus { return d.statuses }

// Expanded returns the size NodeExpandVolume last recorded for volumeID.
func (d *Driver) Expanded(volumeID string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.expanded[volumeID]
}

// Calls returns how many times the Node service's method (e.g.
// "NodeStageVolume") was called.
func (d *Driver) Calls(method string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[method]
}

func (d *Driver) count(method string) {
	d.mu.Lock()
	d.calls[method]++
	d.mu.Unlock()
}

// VolumeDir is where the volume volumeID's data is.
func (d *Driver) VolumeDir(volumeID string) string {
	return filepath.Join(d.opts.DataRoot, volumeID)
}

type registration struct {
	registerapi.UnimplementedRegistrationServer
	d *Driver
}

func (r registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.d.opts.Name,
		Endpoint: r.d.opts.Endpoint, SupportedVersions: []string{"1.0.0"}}, nil
}

func (r registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	select {
	case r.d.statuses <- s:
	default:
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

type identity struct {
	csipb.UnimplementedIdentityServer
	d *Driver
}

func (i identity) GetPluginInfo(context.Context, *csipb.GetPluginInfoRequest) (*csipb.GetPluginInfoResponse, error) {
	return &csipb.GetPluginInfoResponse{Name: i.d.opts.Name, VendorVersion: "e2e"}, nil
}

func (i identity) GetPluginCapabilities(context.Context, *csipb.GetPluginCapabilitiesRequest) (*csipb.GetPluginCapabilitiesResponse, error) {
	return &csipb.GetPluginCapabilitiesResponse{Capabilities: []*csipb.PluginCapability{{
		Type: &csipb.PluginCapability_Service_{Service: &csipb.PluginCapability_Service{
			Type: csipb.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS}},
	}}}, nil
}

func (i identity) Probe(context.Context, *csipb.ProbeRequest) (*csipb.ProbeResponse, error) {
	return &csipb.ProbeResponse{}, nil
}

type node struct {
	csipb.UnimplementedNodeServer
	d *Driver
}

func (n node) NodeGetInfo(context.Context, *csipb.NodeGetInfoRequest) (*csipb.NodeGetInfoResponse, error) {
	n.d.count("NodeGetInfo")
	resp := &csipb.NodeGetInfoResponse{NodeId: n.d.opts.NodeID, MaxVolumesPerNode: n.d.opts.MaxVolumesPerNode}
	if n.d.opts.TopologyKey != "" {
		resp.AccessibleTopology = &csipb.Topology{Segments: map[string]string{n.d.opts.TopologyKey: n.d.opts.NodeID}}
	}
	return resp, nil
}

func (n node) NodeGetCapabilities(context.Context, *csipb.NodeGetCapabilitiesRequest) (*csipb.NodeGetCapabilitiesResponse, error) {
	n.d.count("NodeGetCapabilities")
	var caps []*csipb.NodeServiceCapability
	for _, t := range []csipb.NodeServiceCapability_RPC_Type{
		csipb.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csipb.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csipb.NodeServiceCapability_RPC_EXPAND_VOLUME,
	} {
		caps = append(caps, &csipb.NodeServiceCapability{Type: &csipb.NodeServiceCapability_Rpc{
			Rpc: &csipb.NodeServiceCapability_RPC{Type: t}}})
	}
	return &csipb.NodeGetCapabilitiesResponse{Capabilities: caps}, nil
}

func (n node) NodeStageVolume(_ context.Context, req *csipb.NodeStageVolumeRequest) (*csipb.NodeStageVolumeResponse, error) {
	n.d.count("NodeStageVolume")
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	if err := checkID(id); err != nil {
		return nil, err
	}
	if staging == "" || req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "staging target path and volume capability are required")
	}
	if req.GetVolumeCapability().GetBlock() != nil {
		return nil, status.Error(codes.InvalidArgument, "block volumes are not supported")
	}
	n.d.mu.Lock()
	n.d.stageContexts[id] = req.GetPublishContext()
	n.d.mu.Unlock()
	if size := req.GetVolumeContext()[TmpfsSizeKey]; size != "" {
		if err := mountTmpfs(staging, size); err != nil {
			return nil, err
		}
		n.d.mu.Lock()
		n.d.tmpfs[id] = staging
		n.d.mu.Unlock()
		return &csipb.NodeStageVolumeResponse{}, nil
	}
	src := n.d.VolumeDir(id)
	if err := os.MkdirAll(src, 0o777); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := bindMount(src, staging, false); err != nil {
		return nil, err
	}
	return &csipb.NodeStageVolumeResponse{}, nil
}

func (n node) NodeUnstageVolume(_ context.Context, req *csipb.NodeUnstageVolumeRequest) (*csipb.NodeUnstageVolumeResponse, error) {
	n.d.count("NodeUnstageVolume")
	if err := checkID(req.GetVolumeId()); err != nil {
		return nil, err
	}
	if err := unmount(req.GetStagingTargetPath()); err != nil {
		return nil, err
	}
	n.d.mu.Lock()
	delete(n.d.tmpfs, req.GetVolumeId())
	n.d.mu.Unlock()
	return &csipb.NodeUnstageVolumeResponse{}, nil
}

func (n node) NodePublishVolume(_ context.Context, req *csipb.NodePublishVolumeRequest) (*csipb.NodePublishVolumeResponse, error) {
	n.d.count("NodePublishVolume")
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if err := checkID(id); err != nil {
		return nil, err
	}
	if target == "" || req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "target path and volume capability are required")
	}
	n.d.mu.Lock()
	fail := n.d.failPublish[id]
	n.d.mu.Unlock()
	if fail != "" {
		return nil, status.Error(codes.Internal, fail)
	}
	src := req.GetStagingTargetPath()
	if req.GetVolumeContext()[ephemeralKey] == "true" {
		src = n.d.VolumeDir(id)
		if err := os.MkdirAll(src, 0o777); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if err := os.WriteFile(src+ephemeralMarker, nil, 0o600); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	} else if src == "" {
		return nil, status.Error(codes.FailedPrecondition, "volume "+id+" is not staged")
	}
	if err := bindMount(src, target, req.GetReadonly()); err != nil {
		return nil, err
	}
	n.d.mu.Lock()
	n.d.published[id] = time.Now()
	n.d.mu.Unlock()
	return &csipb.NodePublishVolumeResponse{}, nil
}

func (n node) NodeUnpublishVolume(_ context.Context, req *csipb.NodeUnpublishVolumeRequest) (*csipb.NodeUnpublishVolumeResponse, error) {
	n.d.count("NodeUnpublishVolume")
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if err := checkID(id); err != nil {
		return nil, err
	}
	if err := unmount(target); err != nil {
		return nil, err
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	// An inline ephemeral volume's data goes with its only publication.
	if dir := n.d.VolumeDir(id); exists(dir + ephemeralMarker) {
		if err := os.RemoveAll(dir); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if err := os.Remove(dir + ephemeralMarker); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return &csipb.NodeUnpublishVolumeResponse{}, nil
}

func (n node) NodeGetVolumeStats(_ context.Context, req *csipb.NodeGetVolumeStatsRequest) (*csipb.NodeGetVolumeStatsResponse, error) {
	n.d.count("NodeGetVolumeStats")
	var st unix.Statfs_t
	if err := unix.Statfs(req.GetVolumePath(), &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, status.Error(codes.NotFound, err.Error())
		}
		return nil, status.Error(codes.Internal, err.Error())
	}
	bs := int64(st.Bsize)
	return &csipb.NodeGetVolumeStatsResponse{Usage: []*csipb.VolumeUsage{
		{Unit: csipb.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
		{Unit: csipb.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
	}}, nil
}

func (n node) NodeExpandVolume(_ context.Context, req *csipb.NodeExpandVolumeRequest) (*csipb.NodeExpandVolumeResponse, error) {
	n.d.count("NodeExpandVolume")
	if err := checkID(req.GetVolumeId()); err != nil {
		return nil, err
	}
	size := req.GetCapacityRange().GetRequiredBytes()
	n.d.mu.Lock()
	staging := n.d.tmpfs[req.GetVolumeId()]
	n.d.mu.Unlock()
	if staging != "" {
		// The tmpfs grows in place: every bind mount of it (the
		// published targets, the containers' mounts) sees the new size.
		if err := unix.Mount("tmpfs", staging, "tmpfs", unix.MS_REMOUNT, fmt.Sprintf("size=%d", size)); err != nil {
			return nil, status.Errorf(codes.Internal, "grow the tmpfs of volume %s on %s to %d bytes: %v", req.GetVolumeId(), staging, size, err)
		}
	}
	n.d.mu.Lock()
	n.d.expanded[req.GetVolumeId()] = size
	n.d.mu.Unlock()
	return &csipb.NodeExpandVolumeResponse{CapacityBytes: size}, nil
}

// checkID refuses a volume ID that is not one directory name.
func checkID(id string) error {
	if id == "" || strings.ContainsAny(id, "/\x00") || id == "." || id == ".." {
		return status.Errorf(codes.InvalidArgument, "invalid volume ID %q", id)
	}
	return nil
}

// bindMount mounts src on target (created when missing) unless target is
// a mount point already (a repeated call), read-only when ro.
func bindMount(src, target string, ro bool) error {
	if err := os.MkdirAll(target, 0o750); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	mounted, err := isMountPoint(target)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if mounted {
		return nil
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return status.Errorf(codes.Internal, "bind mount %s on %s: %v", src, target, err)
	}
	if ro {
		if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			_ = unix.Unmount(target, 0)
			return status.Errorf(codes.Internal, "remount %s read-only: %v", target, err)
		}
	}
	return nil
}

// mountTmpfs mounts a tmpfs of size bytes on target (created when
// missing) unless target is a mount point already (a repeated call).
func mountTmpfs(target, size string) error {
	if _, err := strconv.ParseUint(size, 10, 64); err != nil {
		return status.Errorf(codes.InvalidArgument, "volume context %s=%q is not a size in bytes", TmpfsSizeKey, size)
	}
	if err := os.MkdirAll(target, 0o750); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	mounted, err := isMountPoint(target)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if mounted {
		return nil
	}
	if err := unix.Mount("tmpfs", target, "tmpfs", 0, "mode=0777,size="+size); err != nil {
		return status.Errorf(codes.Internal, "mount a tmpfs of %s bytes on %s: %v", size, target, err)
	}
	return nil
}

// unmount unmounts path if it is a mount point.
func unmount(path string) error {
	if path == "" {
		return status.Error(codes.InvalidArgument, "path is required")
	}
	for {
		mounted, err := isMountPoint(path)
		if err != nil {
			return status.Error(codes.Internal, err.Error())
		}
		if !mounted {
			return nil
		}
		if err := unix.Unmount(path, 0); err != nil {
			return status.Errorf(codes.Internal, "unmount %s: %v", path, err)
		}
	}
}

// isMountPoint reports whether path is a mount point in this mount
// namespace (bind mounts of the same filesystem included).
func isMountPoint(path string) (bool, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	path = filepath.Clean(path)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && unescape(f[4]) == path {
			return true, nil
		}
	}
	return false, nil
}

// unescape decodes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
