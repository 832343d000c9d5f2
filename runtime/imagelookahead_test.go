package runtime_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/runtime/fakecri"
)

// TestImagesAreLookedUpWhileTheSandboxIsMade: the first sync of a pod asks
// for its containers' image statuses while it creates the sandbox, once per
// image, instead of one round trip after the sandbox's: the fake runtime
// answers RunPodSandbox only once both images were asked for. What the
// cluster sees is as before: each container's Pulled, Created and Started
// events in the kubelet's order.
func TestImagesAreLookedUpWhileTheSandboxIsMade(t *testing.T) {
	h := newHarness(t, fakecri.Options{}, nil)
	web := ctr("web", "nginx")
	web.Image = "nginx:1.27"
	pod := newPod("lookahead", ctr("app", "sleep", "3600"), ctr("side", "sleep", "3600"), web)

	var mu sync.Mutex
	asked := map[string]bool{}
	bothAsked := make(chan struct{})
	h.cri.SetReplyRewriter(func(method string, req any, reply proto.Message) (proto.Message, error) {
		switch method {
		case "ImageStatus":
			mu.Lock()
			defer mu.Unlock()
			asked[req.(*runtimeapi.ImageStatusRequest).GetImage().GetImage()] = true
			if len(asked) == 2 && !closed(bothAsked) {
				close(bothAsked)
			}
		case "RunPodSandbox":
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			select {
			case <-bothAsked:
			case <-ctx.Done():
				return nil, errors.New("the images' statuses were not asked for while the sandbox was made")
			}
		}
		return reply, nil
	})
	before := h.cri.Calls("ImageStatus")
	res := h.sync(pod, nil)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if got := h.cri.Calls("ImageStatus") - before; got != 2 {
		t.Errorf("ImageStatus calls during the sync: %d, want 2 (one per image)", got)
	}
	for _, name := range []string{"app", "side", "web"} {
		if c := h.container(pod, name); c.Image == "" {
			t.Errorf("container %s has no image", name)
		}
	}
	wantEvents(t, h.events(),
		`Normal Pulled Container image "busybox" already present on machine`, "Normal Created", "Normal Started",
		`Normal Pulled Container image "busybox" already present on machine`, "Normal Created", "Normal Started",
		`Normal Pulled Container image "nginx:1.27" already present on machine`, "Normal Created", "Normal Started")
}

// closed reports whether ch is closed.
func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
