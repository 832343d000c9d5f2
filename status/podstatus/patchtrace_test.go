package podstatus_test

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodekit/nodekit/status/podstatus"
)

// podServer is an API server over HTTP/2 holding one pod: GET returns it,
// a strategic merge PATCH of its status applies to it.
type podServer struct {
	mu      sync.Mutex
	pod     *v1.Pod
	patches int
}

func (s *podServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, err := json.Marshal(s.pod)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/default/pods/web":
	case r.Method == http.MethodPatch && r.URL.Path == "/api/v1/namespaces/default/pods/web/status":
		patch, err := io.ReadAll(r.Body)
		if err == nil {
			data, err = strategicpatch.StrategicMergePatch(data, patch, &v1.Pod{})
		}
		if err == nil {
			var pod v1.Pod
			if err = json.Unmarshal(data, &pod); err == nil {
				s.pod = &pod
				s.patches++
			}
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(data)
}

// TestStartPatchPhasesOverHTTP: the PATCH that ends a pod's start, made
// over HTTP/2, has each of its phases recorded once in
// nodekit_pod_start_status_patch_phase_duration_seconds, adding up to its
// round trip; a later PATCH of the started pod is not traced.
func TestStartPatchPhasesOverHTTP(t *testing.T) {
	p := testPod(v1.RestartPolicyAlways, "a")
	api := &podServer{pod: p.DeepCopy()}
	srv := httptest.NewUnstartedServer(api)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	m, err := podstatus.NewManager(podstatus.Options{Client: client, Registerer: reg, PendingWriteDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	runManager(t, m)
	patches := func() int {
		api.mu.Lock()
		defer api.mu.Unlock()
		return api.patches
	}
	histograms := func() map[string][2]float64 {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][2]float64{}
		for _, f := range families {
			for _, metric := range f.GetMetric() {
				key := f.GetName()
				for _, l := range metric.GetLabel() {
					key += "/" + l.GetValue()
				}
				if h := metric.GetHistogram(); h != nil {
					got[key] = [2]float64{float64(h.GetSampleCount()), h.GetSampleSum()}
				}
				if c := metric.GetCounter(); c != nil {
					got[key] = [2]float64{c.GetValue()}
				}
			}
		}
		return got
	}
	m.PodSeen(p.UID, time.Now())
	started := time.Now()
	m.SetPodStatus(p, podstatus.Generate(p, rt(running("a", started)), nil, podstatus.GenerateOptions{}))
	waitFor(t, "the started status's PATCH timed", func() bool {
		return histograms()["nodekit_pod_start_status_patch_duration_seconds"][0] == 1
	})
	got := histograms()
	roundTrip := got["nodekit_pod_start_status_patch_duration_seconds"][1]
	var sum float64
	for _, phase := range []string{"connection", "write", "answer", "read"} {
		h := got["nodekit_pod_start_status_patch_phase_duration_seconds/"+phase]
		if h[0] != 1 {
			t.Errorf("phase %s recorded %v times, want once", phase, h[0])
		}
		sum += h[1]
	}
	if math.Abs(sum-roundTrip) > 1e-6 {
		t.Errorf("the phases add up to %vs, want the round trip's %vs", sum, roundTrip)
	}

	// A later write of the started pod is neither a start nor traced.
	m.SetPodStatus(p, podstatus.Generate(p, rt(exited("a", started, 1)), nil, podstatus.GenerateOptions{}))
	waitFor(t, "the exit's PATCH answered", func() bool {
		return histograms()["nodekit_pod_status_patches_total/patched"][0] == 2
	})
	if n := patches(); n != 2 {
		t.Fatalf("the API server took %d status PATCHes, want 2", n)
	}
	for key, h := range histograms() {
		if strings.HasPrefix(key, "nodekit_pod_start_status_patch_") && h[0] != 1 {
			t.Errorf("%s has %v samples after a later write, want 1", key, h[0])
		}
	}
}
