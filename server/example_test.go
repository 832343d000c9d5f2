package server_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	v1 "k8s.io/api/core/v1"

	"github.com/nodekit/nodekit/server"
)

// An embedder whose pods are not run by a CRI runtime serves container logs
// from elsewhere by replacing the default route, and adds an endpoint of
// its own; both sit behind the node API's authentication and
// authorization.
func Example_routes() {
	s, err := server.New(server.Options{
		NodeName: "node-a",
		Port:     -1, // serve the Handler ourselves here
		Pods:     func() []*v1.Pod { return nil },
		// Tests and demos only: let every request through.
		Authentication: server.AuthnOptions{Anonymous: true, DisableWebhook: true},
		Authorization:  server.AuthzOptions{Mode: server.AuthorizationModeAlwaysAllow},
		Routes: []server.Route{
			{
				Path:    "/containerLogs/{podNamespace}/{podID}/{containerName}",
				Methods: []string{http.MethodGet},
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					fmt.Fprintf(w, "logs of %s/%s/%s from my backend\n", r.PathValue("podNamespace"), r.PathValue("podID"), r.PathValue("containerName"))
				}),
			},
			{
				Path:         "/backend/status",
				Subresources: []string{"proxy"},
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					u, _ := server.UserFrom(r.Context())
					fmt.Fprintf(w, "backend ok for %s\n", u.Name)
				}),
			},
		},
	})
	if err != nil {
		panic(err)
	}
	for _, path := range []string{"/containerLogs/default/web/app", "/backend/status"} {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		body, _ := io.ReadAll(rec.Body)
		fmt.Print(rec.Code, " ", string(body))
	}
	// Output:
	// 200 logs of default/web/app from my backend
	// 200 backend ok for system:anonymous
}
