// Command grpchealth is the e2e image for gRPC probes: a gRPC server that
// implements only the standard grpc.health.v1.Health service. The whole
// server ("") and every service named with -serving answer SERVING; any
// other service name answers NotFound, as grpc-go's health server does, which
// a probe counts as a failure.
//
// It is built statically (CGO_ENABLED=0) by the e2e harness into an image
// holding nothing else, and exits 0 on SIGTERM or SIGINT.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	os.Exit(run(os.Args[1:], signals, os.Stderr))
}

// run serves on the -port until a signal arrives; bad arguments or a port
// that cannot be bound are exit status 2 and 1.
func run(args []string, signals <-chan os.Signal, stderr io.Writer) int {
	fs := flag.NewFlagSet("grpchealth", flag.ContinueOnError)
	fs.SetOutput(stderr)
	port := fs.Int("port", 8090, "TCP port to serve gRPC on, on every address")
	serving := fs.String("serving", "", "comma-separated service names that answer SERVING besides the server (\"\")")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", *port))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	srv := newServer(strings.Split(*serving, ","))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	fmt.Fprintf(stderr, "serving grpc.health.v1 on %s\n", ln.Addr())
	select {
	case <-signals:
		srv.Stop()
		return 0
	case err := <-done:
		fmt.Fprintln(stderr, err)
		return 1
	}
}

// newServer returns a gRPC server with the health service: "" and the
// named services SERVING.
func newServer(serving []string) *grpc.Server {
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	for _, name := range serving {
		if name = strings.TrimSpace(name); name != "" {
			h.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
		}
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, h)
	return srv
}
