package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// CRIClient is a connection to a daemon's CRI services, the API crictl
// speaks. Close it when done; its clients are safe for concurrent use.
type CRIClient struct {
	Runtime runtimeapi.RuntimeServiceClient
	Images  runtimeapi.ImageServiceClient
	conn    *grpc.ClientConn
}

// Close closes the connection.
func (c *CRIClient) Close() error { return c.conn.Close() }

// CRI connects to the daemon's CRI runtime and image services, for tests
// that look at what a node agent asked of the runtime (what `crictl ps` and
// `crictl inspect` show). The connection is lazy: it does not fail while the
// daemon is down, its calls do.
func (c *Containerd) CRI() (*CRIClient, error) {
	conn, rs, err := c.dialCRI()
	if err != nil {
		return nil, err
	}
	return &CRIClient{Runtime: rs, Images: runtimeapi.NewImageServiceClient(conn), conn: conn}, nil
}

// ImportImage imports a docker-archive tarball (WriteImage, BuildImages)
// into the daemon's CRI namespace, as `ctr images import` does, so that the
// CRI lists it and pods run it without a pull.
func (c *Containerd) ImportImage(ctx context.Context, tarball string) error {
	if _, err := runCommand(ctx, c.Dir, nil, nil, c.ctr, "--address", c.Socket, "--namespace", criNamespace, "images", "import", tarball); err != nil {
		return fmt.Errorf("import %s into containerd at %s: %w", tarball, c.Endpoint, err)
	}
	return nil
}

// WriteImage writes a one-layer image tagged ref, holding files (path in the
// image to content, mode 0644) and no entrypoint, as a docker archive at
// path for ImportImage. The same ref and files give the same image ID.
func WriteImage(path, ref string, files map[string]string) error {
	names := make([]string, 0, len(files))
	for name := range files {
		if name == "" || filepath.IsAbs(name) {
			return fmt.Errorf("build image %s: file name %q must be relative", ref, name)
		}
		names = append(names, name)
	}
	sort.Strings(names)
	l := newLayer()
	for _, name := range names {
		l.file(name, []byte(files[name]), 0o644)
	}
	return writeImage(path, ref, l, v1.Config{})
}
