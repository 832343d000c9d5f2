package runtime_test

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/podstate"
	"github.com/nodekit/nodekit/runtime"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// While the services cannot be listed (no API server answered yet), a pod
// from the API server waits, and a static pod starts without service
// variables, as with the kubelet.
func TestStaticPodsDoNotWaitForServices(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, func(o *runtime.PodManagerOptions) {
		o.Services = func() ([]*v1.Service, error) {
			return nil, errors.New("services have not yet been read at least once, cannot construct envvars")
		}
	})
	api := newPod("from-api", ctr("app"))
	res := h.sync(api, nil)
	if !errors.Is(res.Waiting["app"].Reason, podstate.ErrCreateContainerConfig) {
		t.Errorf("a pod from the API server: waiting %+v, want CreateContainerConfigError", res.Waiting)
	}
	static := newPod("static", ctr("app"))
	static.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
	if res := h.sync(static, nil); res.Err != nil || len(res.Waiting) != 0 {
		t.Fatalf("a static pod: err %v, waiting %+v", res.Err, res.Waiting)
	}
	if h.container(static, "app").ID == "" {
		t.Error("the static pod's container was not created")
	}
}
