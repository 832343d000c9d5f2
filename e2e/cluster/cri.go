package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	ggcrtarball "github.com/google/go-containerregistry/pkg/v1/tarball"
	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/util/wait"
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
// into the daemon's CRI namespace, as `ctr images import` does, and returns
// once the CRI lists each of its tags, so that pods run it without a pull
// (containerd 2's CRI learns of an imported image from an event, a moment
// after ctr returns).
func (c *Containerd) ImportImage(ctx context.Context, tarball string) error {
	manifest, err := ggcrtarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(tarball) })
	if err != nil {
		return fmt.Errorf("import %s into containerd at %s: %w", tarball, c.Endpoint, err)
	}
	if _, err := runCommand(ctx, c.Dir, nil, nil, c.ctr, "--address", c.Socket, "--namespace", criNamespace, "images", "import", tarball); err != nil {
		return fmt.Errorf("import %s into containerd at %s: %w", tarball, c.Endpoint, err)
	}
	conn, _, err := c.dialCRI()
	if err != nil {
		return err
	}
	defer conn.Close()
	images := runtimeapi.NewImageServiceClient(conn)
	for _, m := range manifest {
		for _, tag := range m.RepoTags {
			var last error
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				resp, err := images.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: tag}})
				last = err
				return err == nil && resp.GetImage() != nil, nil
			})
			if err != nil {
				return fmt.Errorf("import %s into containerd at %s: the CRI does not list %s (last error: %v): %w", tarball, c.Endpoint, tag, last, err)
			}
		}
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
