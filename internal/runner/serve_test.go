package runner

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestServeGRPCStopsWithItsContext: ServeGRPC serves in its caller's
// goroutine, answers calls, and returns nil once its context is done, the
// server stopped (a client's next call fails).
func TestServeGRPCStopsWithItsContext(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- ServeGRPC(ctx, srv, lis) }()

	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("check while serving: %v", err)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("ServeGRPC after its context was done: %v, want nil", err)
	}
	if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); err == nil {
		t.Error("the server still answered after ServeGRPC returned")
	}
}

// TestServeGRPCReportsServeErrors: a listener that fails is Serve's error,
// and the server is stopped.
func TestServeGRPCReportsServeErrors(t *testing.T) {
	lis, err := net.Listen("unix", filepath.Join(t.TempDir(), "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	lis.Close()
	srv := grpc.NewServer()
	if err := ServeGRPC(context.Background(), srv, lis); err == nil {
		t.Fatal("ServeGRPC on a closed listener returned nil")
	}
	// Stopped: Serve refuses to start again.
	if err := srv.Serve(lis); err != grpc.ErrServerStopped {
		t.Errorf("Serve after ServeGRPC failed: %v, want grpc.ErrServerStopped", err)
	}
}
