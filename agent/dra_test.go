package agent_test

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/nodekit/nodekit/agent/agenttest"
)

// testDRADriver is a DRA driver's kubelet plugin: registration (type
// DRAPlugin) and the v1 DRAPlugin service; a claim gets the CDI device
// "example.com/gpu=<claim>".
type testDRADriver struct {
	registerapi.UnimplementedRegistrationServer
	drapb.UnimplementedDRAPluginServer
	endpoint string

	mu         sync.Mutex
	unprepared []string
}

func (d *testDRADriver) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.DRAPlugin, Name: "gpu.example.com", Endpoint: d.endpoint, SupportedVersions: []string{drapb.DRAPluginService}}, nil
}

func (d *testDRADriver) NotifyRegistrationStatus(context.Context, *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	return &registerapi.RegistrationStatusResponse{}, nil
}

func (d *testDRADriver) NodePrepareResources(_ context.Context, req *drapb.NodePrepareResourcesRequest) (*drapb.NodePrepareResourcesResponse, error) {
	resp := &drapb.NodePrepareResourcesResponse{Claims: map[string]*drapb.NodePrepareResourceResponse{}}
	for _, c := range req.Claims {
		resp.Claims[c.Uid] = &drapb.NodePrepareResourceResponse{Devices: []*drapb.Device{{
			PoolName: "pool", DeviceName: "gpu-0", CdiDeviceIds: []string{"example.com/gpu=" + c.Name},
		}}}
	}
	return resp, nil
}

func (d *testDRADriver) NodeUnprepareResources(_ context.Context, req *drapb.NodeUnprepareResourcesRequest) (*drapb.NodeUnprepareResourcesResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	resp := &drapb.NodeUnprepareResourcesResponse{Claims: map[string]*drapb.NodeUnprepareResourceResponse{}}
	for _, c := range req.Claims {
		d.unprepared = append(d.unprepared, c.Name)
		resp.Claims[c.Uid] = &drapb.NodeUnprepareResourceResponse{}
	}
	return resp, nil
}

// TestAgentPreparesResourceClaims checks the DRA wiring on fakecri: a pod
// whose driver is not registered yet is admitted but gets no sandbox
// (FailedPrepareDynamicResources); once the driver registers through
// plugins_registry the pod runs with the claim's CDI device in its
// container's CRI config; deleted, its claim is unprepared.
func TestAgentPreparesResourceClaims(t *testing.T) {
	n := agenttest.Start(t, agenttest.Options{})
	ctx := agenttest.Context(t)
	n.WaitReady(ctx)

	pod := agenttest.Pod("gpu", "busybox")
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("gpu-claim")}}
	pod.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "gpu-claim", UID: "uid-gpu-claim"},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "gpu", Driver: "gpu.example.com", Pool: "pool", Device: "gpu-0",
			}}}},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}},
		},
	}
	if _, err := n.Client.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod = n.CreatePod(ctx, pod)
	poll(ctx, t, "FailedPrepareDynamicResources", func() bool {
		evs := podEvents(ctx, n.Client, pod, "FailedPrepareDynamicResources")
		return len(evs) > 0 && strings.Contains(evs[0].Message, "Failed to prepare dynamic resources: prepare dynamic resources: DRA driver gpu.example.com is not registered")
	})
	if n.CRI.Calls("RunPodSandbox") != 0 {
		t.Fatal("a sandbox was created for a pod whose claims are not prepared")
	}

	root := n.Config.RootDir
	d := &testDRADriver{endpoint: filepath.Join(agenttest.TempDir(t), "dra.sock")}
	draSrv, regSrv := grpc.NewServer(), grpc.NewServer()
	drapb.RegisterDRAPluginServer(draSrv, d)
	registerapi.RegisterRegistrationServer(regSrv, d)
	for _, s := range []struct {
		srv  *grpc.Server
		path string
	}{{draSrv, d.endpoint}, {regSrv, filepath.Join(root, "plugins_registry", "gpu.example.com-reg.sock")}} {
		l, err := net.Listen("unix", s.path)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = s.srv.Serve(l) }()
		t.Cleanup(s.srv.Stop)
	}

	running := n.WaitForPod(ctx, pod, agenttest.PodRunningAndReady)
	id := running.Status.ContainerStatuses[0].ContainerID
	_, id, _ = strings.Cut(id, "://")
	cfg := n.CRI.ContainerConfig(id)
	if cfg == nil || len(cfg.CDIDevices) != 1 || cfg.CDIDevices[0].Name != "example.com/gpu=gpu-claim" {
		t.Fatalf("the container's CRI config has CDI devices %v, want the claim's", cfg.GetCDIDevices())
	}

	if err := n.Client.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "the claim unprepared", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return len(d.unprepared) == 1 && d.unprepared[0] == "gpu-claim"
	})
}
