package pods

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	testclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/features"
	"github.com/nodekit/nodekit/podsource"
	"github.com/nodekit/nodekit/podstate"
)

// fakeHealth is a ResourceHealthProvider that adds one entry named name.
type fakeHealth struct {
	name    v1.ResourceName
	updates chan types.UID
}

func (f *fakeHealth) UpdateAllocatedResourcesStatus(_ *v1.Pod, s *v1.PodStatus) {
	for i := range s.ContainerStatuses {
		s.ContainerStatuses[i].AllocatedResourcesStatus = append(s.ContainerStatuses[i].AllocatedResourcesStatus,
			v1.ResourceStatus{Name: f.name, Resources: []v1.ResourceHealth{{ResourceID: "1", Health: v1.ResourceHealthStatusHealthy}}})
	}
}

func (f *fakeHealth) HealthUpdates() <-chan types.UID { return f.updates }

// TestControllerResourceHealth: the status options apply every provider's
// allocatedResourcesStatus, and an update of any provider syncs the pod.
func TestControllerResourceHealth(t *testing.T) {
	log := &callLog{}
	sources := loggedSources{ch: make(chan podsource.Update)}
	rt := &loggedRuntime{log: log, events: make(chan *podstate.PodLifecycleEvent)}
	devs := &fakeHealth{name: "example.com/dev", updates: make(chan types.UID)}
	claims := &fakeHealth{name: "claim:gpu", updates: make(chan types.UID)}
	runController(t, Options{
		Sources:        sources,
		Runtime:        rt,
		Statuses:       &loggedStatuses{log: log, statuses: map[types.UID]v1.PodStatus{}},
		Node:           knownNode,
		ResourceHealth: []ResourceHealthProvider{devs, claims},
		Clock:          testclock.NewFakeClock(time.Now()),
	})
	sources.ch <- podsource.Update{Op: podsource.OpAdd, Pods: []*v1.Pod{probedPod("a")}, Source: podsource.APIServerSource}
	log.waitFor(t, "a sync", func(c []string) bool { return count(c, "SyncPod") == 1 })

	opts := rt.statusOptions()
	if opts.AllocatedResourcesStatus == nil {
		t.Fatal("the status options carry no allocatedResourcesStatus hook")
	}
	s := &v1.PodStatus{ContainerStatuses: []v1.ContainerStatus{{Name: "app"}}}
	opts.AllocatedResourcesStatus(probedPod("a"), s)
	if got := s.ContainerStatuses[0].AllocatedResourcesStatus; len(got) != 2 || got[0].Name != devs.name || got[1].Name != claims.name {
		t.Errorf("allocatedResourcesStatus = %v, want both providers' entries in order", got)
	}
	devs.updates <- "a"
	log.waitFor(t, "a sync after a device health update", func(c []string) bool { return count(c, "SyncPod") == 2 })
	claims.updates <- "a"
	log.waitFor(t, "a sync after a claim health update", func(c []string) bool { return count(c, "SyncPod") == 3 })
}

// TestControllerResourceHealthGateOff: with ResourceHealthStatus off, as
// on the kubelet, no device health reaches the pods' statuses.
func TestControllerResourceHealthGateOff(t *testing.T) {
	gates, err := features.New(klog.Background(), map[string]bool{"ResourceHealthStatus": false, "ResourceHealthStatusMessage": false})
	if err != nil {
		t.Fatal(err)
	}
	log := &callLog{}
	sources := loggedSources{ch: make(chan podsource.Update)}
	rt := &loggedRuntime{log: log, events: make(chan *podstate.PodLifecycleEvent)}
	devs := &fakeHealth{name: "example.com/dev", updates: make(chan types.UID)}
	runController(t, Options{
		Sources:        sources,
		Runtime:        rt,
		Statuses:       &loggedStatuses{log: log, statuses: map[types.UID]v1.PodStatus{}},
		Node:           knownNode,
		ResourceHealth: []ResourceHealthProvider{devs},
		Features:       gates,
		Clock:          testclock.NewFakeClock(time.Now()),
	})
	sources.ch <- podsource.Update{Op: podsource.OpAdd, Pods: []*v1.Pod{probedPod("a")}, Source: podsource.APIServerSource}
	log.waitFor(t, "a sync", func(c []string) bool { return count(c, "SyncPod") == 1 })
	if opts := rt.statusOptions(); opts.AllocatedResourcesStatus != nil {
		t.Error("ResourceHealthStatus off: the status options carry an allocatedResourcesStatus hook")
	}
}
