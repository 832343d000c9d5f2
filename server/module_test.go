package server

import (
	"context"
	"net"
	"net/http"
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	authzv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

func TestModule(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var s *Server
	app := fxtest.New(t,
		fx.Supply(Options{
			NodeName:       testNode,
			Listener:       ln,
			TLS:            TLSOptions{CertDirectory: t.TempDir()},
			Authentication: AuthnOptions{Anonymous: true},
			Pods:           func() []*v1.Pod { return nil },
		}),
		fx.Provide(func() kubernetes.Interface {
			c := fake.NewClientset()
			sar := &sarFake{allow: func(authzv1.SubjectAccessReviewSpec) bool { return true }}
			c.PrependReactor("create", "subjectaccessreviews", sar.react)
			return c
		}),
		AsRoute(func() Route {
			return Route{Path: "/healthz", Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = w.Write([]byte("mine"))
			})}
		}),
		Module,
		fx.Populate(&s),
	)
	app.RequireStart()
	addr, err := s.Addr(context.Background())
	if err != nil || addr == nil {
		t.Fatalf("server not listening: %v", err)
	}
	// Webhook authorization through the graph's client, the route from the
	// group.
	if code, body, _ := do(t, s.Handler(), "GET", "/healthz", nil); code != http.StatusOK || body != "mine" {
		t.Errorf("/healthz through the module: %d %q", code, body)
	}
	leaf, _ := handshake(t, addr.String(), nil)
	if leaf == nil {
		t.Error("no certificate served")
	}
	app.RequireStop()
}

func TestModuleRouteReplaces(t *testing.T) {
	var s *Server
	app := fxtest.New(t,
		fx.Supply(baseOptions()),
		AsRoute(func() Route {
			return Route{Path: "/healthz", Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = w.Write([]byte("mine"))
			})}
		}),
		Module,
		fx.Populate(&s),
	)
	app.RequireStart()
	defer app.RequireStop()
	if code, body, _ := do(t, s.Handler(), "GET", "/healthz", nil); code != 200 || body != "mine" {
		t.Errorf("/healthz from the route group: %d %q", code, body)
	}
}
