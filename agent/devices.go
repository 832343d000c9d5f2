package agent

import (
	"context"
	"path/filepath"
	"sync"

	"github.com/go-logr/logr"
	"go.uber.org/fx"
	cri "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/devices"
	"github.com/nodekit/nodekit/pods"
	"github.com/nodekit/nodekit/resources/topology"
	"github.com/nodekit/nodekit/resources/topologymanager"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/status"
)

// Name and order of the device manager's node status setter: right after
// the machine info setter, whose allocatable it corrects.
const (
	SetterDevicePlugins = "DevicePlugins"
	OrderSetterDevices  = status.OrderMachineInfo + 50
)

// Devices is the kubelet's device manager (devices.Module) on
// <root-dir>/device-plugins: device plugins' extended resources in the
// node's capacity and allocatable (the DevicePlugins setter), their devices
// allocated at admission by the topology manager, whose first hint
// provider the device manager is (ResourceManagers' TopologyManager admit
// handler, which rejects a pod with UnexpectedAdmissionError or
// TopologyAffinityError as the kubelet), and the allocations put into the
// containers' CRI configs (runtime.PodManagerOptions'
// ContainerConfigHook). It replaces the GeneralPredicates admit handler
// with one that fits a pod holding devices on the node as
// devices.Manager.NodeForAdmission gives it (a running pod admitted again
// after a restart, before its plugin registers again). It is the pod
// lifecycle loop's pods.ResourceHealthProvider: each container's devices
// and their health in its status (allocatedResourcesStatus, the kubelet's
// ResourceHealthStatus, beta and on by default in 1.37), a pod synced when
// its devices' health changes. It needs ResourceManagers; CRI includes
// both.
var Devices = fx.Options(
	fx.Provide(
		provideDeviceOptions,
		// The devices' health in the pods' statuses (ResourceHealthStatus).
		fx.Annotated{Group: pods.ResourceHealthGroup, Target: func(m *devices.Manager) pods.ResourceHealthProvider { return m }},
	),
	pods.AsAdmitHandler(pods.AdmitGeneralPredicates, pods.OrderGeneralPredicates, devicePredicates),
	status.AsSetter(SetterDevicePlugins, OrderSetterDevices, func(m *devices.Manager) status.Setter { return m.SetNodeStatus }),
	devices.Module,
)

type deviceParams struct {
	fx.In

	Config *Config
	// Store gives the active pods and the loop's SourcesReady: the
	// sources' first updates handled, not only received, as the kubelet's
	// sourcesReady. While the loop admits the pods it found on an agent
	// restart the sources are not ready, so their running containers keep
	// their checkpointed devices even before their plugin registers again;
	// podsource.Config.AllReady is already true then, and rejected those
	// pods.
	Store   *pods.Store
	Runtime cri.RuntimeService
	// Machine and Topology give the NUMA nodes the devices' topology hints
	// are made of and the affinity their allocation follows.
	Machine  *topology.Machine
	Topology *topologymanager.Manager
	Logger   logr.Logger `optional:"true"`
}

func provideDeviceOptions(p deviceParams) devices.Options {
	return devices.Options{
		PluginDir:        filepath.Join(p.Config.RootDir, "device-plugins"),
		ActivePods:       p.Store.Active,
		SourcesReady:     p.Store.SourcesReady,
		ContainerRunning: initialRunning(p.Runtime, p.Logger),
		NUMANodes:        p.Machine.NUMANodeIDs(),
		Affinity:         p.Topology.GetAffinity,
	}
}

// initialRunning answers from the containers the runtime ran when first
// asked, as the kubelet's initial running set: the device manager asks only
// while the pod sources are not ready, to tell an agent restart (the
// container runs with its devices) from a node reboot.
func initialRunning(rs cri.RuntimeService, logger logr.Logger) func(podUID, container string) bool {
	var once sync.Once
	running := map[[2]string]bool{}
	return func(podUID, container string) bool {
		once.Do(func() {
			cs, err := rs.ListContainers(context.Background(), &runtimeapi.ContainerFilter{
				State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
			})
			if err != nil {
				if logger.GetSink() != nil {
					logger.Error(err, "Device manager: cannot list the running containers")
				}
				return
			}
			for _, c := range cs {
				running[[2]string{c.Labels[runtime.LabelPodUID], c.Labels[runtime.LabelContainerName]}] = true
			}
		})
		return running[[2]string{podUID, container}]
	}
}

// devicePredicates is pods.GeneralPredicates on the node as the device
// manager gives it for the pod, as the kubelet's predicate admit handler
// runs the device manager's UpdatePluginResources first.
func devicePredicates(m *devices.Manager, logger logr.Logger) pods.AdmitHandler {
	if logger.GetSink() == nil {
		logger = klog.Background()
	}
	preds := pods.GeneralPredicates(logger)
	return pods.AdmitFunc(func(a pods.AdmitAttributes) pods.AdmitResult {
		a.Node = m.NodeForAdmission(a.Pod, a.Node)
		return preds.Admit(a)
	})
}
