package agent

import (
	"net/http"
	"reflect"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestLazyClientsetMatchesClientGo: every group client of the lazy
// clientset requests the same URLs as client-go's clientset built from
// the same config, is built once, and shares the one rate limiter.
func TestLazyClientsetMatchesClientGo(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:6443", QPS: 5, Burst: 10}
	h := &http.Client{}
	lazy, err := newLazyClientset(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	eager, err := kubernetes.NewForConfigAndClient(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	limiter := lazy.CoreV1().RESTClient().GetRateLimiter()
	if limiter == nil {
		t.Fatal("no rate limiter for QPS 5")
	}
	iface := reflect.TypeFor[kubernetes.Interface]()
	lv, ev := reflect.ValueOf(lazy), reflect.ValueOf(eager)
	for i := range iface.NumMethod() {
		name := iface.Method(i).Name
		if name == "Discovery" {
			if lazy.Discovery().RESTClient() == nil || lazy.Discovery() != lazy.Discovery() {
				t.Error("Discovery: no REST client, or a new client on every call")
			}
			continue
		}
		got := lv.MethodByName(name).Call(nil)[0]
		if again := lv.MethodByName(name).Call(nil)[0]; again.Interface() != got.Interface() {
			t.Errorf("%s: a new client on every call", name)
		}
		want := ev.MethodByName(name).Call(nil)[0]
		rc := func(v reflect.Value) rest.Interface {
			return v.MethodByName("RESTClient").Call(nil)[0].Interface().(rest.Interface)
		}
		gotURL, wantURL := rc(got).Get().Resource("things").URL().String(), rc(want).Get().Resource("things").URL().String()
		if gotURL != wantURL {
			t.Errorf("%s: requests %s, client-go's %s", name, gotURL, wantURL)
		}
		if rc(got).GetRateLimiter() != limiter {
			t.Errorf("%s: a rate limiter of its own", name)
		}
	}
}

func TestLazyClientsetRefusesQPSWithoutBurst(t *testing.T) {
	if _, err := newLazyClientset(&rest.Config{Host: "https://127.0.0.1:6443", QPS: 5}, &http.Client{}); err == nil {
		t.Error("QPS without burst accepted")
	}
}
