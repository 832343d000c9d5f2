package runtime

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	cri "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ImageMounts records, by container ID, the images the containers mount
// as image volumes, so that the image garbage collector knows them in use
// without asking the runtime for every container's status at every
// collection. The PodManager records each container it creates
// (PodManagerOptions.ImageMounts); a container it did not create (one
// that ran before the agent restarted, or another client's) is asked for
// its status once, the first time the ImageGC sees it. Share one between
// the PodManager and the ImageGC (ImageGCOptions.ImageMounts). Its
// methods are safe for concurrent use.
type ImageMounts struct {
	mu sync.Mutex
	// byContainer are the image references each known container mounts
	// (none for most).
	byContainer map[string][]string
}

// NewImageMounts returns an empty ImageMounts.
func NewImageMounts() *ImageMounts {
	return &ImageMounts{byContainer: map[string][]string{}}
}

// record notes the images the mounts of container id name and returns
// them. A nil ImageMounts records nothing.
func (m *ImageMounts) record(id string, mounts []*runtimeapi.Mount) []string {
	var images []string
	for _, mnt := range mounts {
		if img := mnt.GetImage().GetImage(); img != "" {
			images = append(images, img)
		}
	}
	if m != nil {
		m.mu.Lock()
		m.byContainer[id] = images
		m.mu.Unlock()
	}
	return images
}

// inUse adds to used the images the containers mount, asking rs for the
// status of a container not known yet (once: the answer is kept), and
// forgets the containers no longer listed.
func (m *ImageMounts) inUse(ctx context.Context, rs cri.RuntimeService, containers []*runtimeapi.Container, used map[string]bool) error {
	listed := make(map[string]bool, len(containers))
	var unknown []string
	m.mu.Lock()
	for _, c := range containers {
		listed[c.GetId()] = true
		if images, ok := m.byContainer[c.GetId()]; ok {
			for _, img := range images {
				used[img] = true
			}
		} else {
			unknown = append(unknown, c.GetId())
		}
	}
	for id := range m.byContainer {
		if !listed[id] {
			delete(m.byContainer, id)
		}
	}
	m.mu.Unlock()
	for _, id := range unknown {
		resp, err := rs.ContainerStatus(ctx, id, false)
		if status.Code(err) == codes.NotFound {
			continue
		}
		if err != nil {
			return fmt.Errorf("get container status of %s: %w", id, err)
		}
		for _, img := range m.record(id, resp.GetStatus().GetMounts()) {
			used[img] = true
		}
	}
	return nil
}
