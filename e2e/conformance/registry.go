package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// localRegistry is an OCI registry on loopback serving the test images, so
// that a pod pulling with imagePullPolicy Always (the ImageVolume
// conformance test) is served as by upstream's registry. containerd pulls
// from a loopback registry with a port over plain HTTP without
// configuration. Blobs are kept on disk, manifests in memory.
type localRegistry struct {
	host string // 127.0.0.1:<port>
	srv  *http.Server
}

// startRegistry serves a registry on a free loopback port, its blobs in
// dir, until close.
func startRegistry(dir string) (*localRegistry, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("test image registry: %w", err)
	}
	r := &localRegistry{host: ln.Addr().String()}
	r.srv = &http.Server{
		Handler: registry.New(
			registry.Logger(log.New(io.Discard, "", 0)),
			registry.WithBlobHandler(registry.NewDiskBlobHandler(dir)),
		),
		ReadHeaderTimeout: time.Minute,
	}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

// push uploads the image of the docker archive at archive, tagged ref in
// it, to ref, which names this registry.
func (r *localRegistry) push(ctx context.Context, archive, ref string) error {
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	if tag.RegistryStr() != r.host {
		return fmt.Errorf("push %s: not an image of the test registry %s", ref, r.host)
	}
	img, err := tarball.ImageFromPath(archive, &tag)
	if err != nil {
		return fmt.Errorf("push %s: read %s: %w", ref, archive, err)
	}
	if err := remote.Write(tag, img, remote.WithContext(ctx)); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}

// close stops serving, ending open connections.
func (r *localRegistry) close() error {
	if err := r.srv.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("test image registry: %w", err)
	}
	return nil
}
