package stats_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"

	"github.com/nodekit/nodekit/runtime/fakecri"
)

// A runtime filesystem whose capacity cannot be read is said at --v=2 when
// that starts (or its error changes), not again every round: the eviction
// manager asks for a summary every 10 s.
func TestUnreadableRuntimeFilesystemIsLoggedOnce(t *testing.T) {
	h := newHost(t, 1)
	images := filepath.Join(h.dir, "images")
	h.startCRI(fakecri.Options{ImageFsMountpoint: images}) // not created
	var mu sync.Mutex
	var lines []string
	logger := funcr.New(func(_, args string) {
		if strings.Contains(args, "Cannot read the capacity of a runtime filesystem") {
			mu.Lock()
			lines = append(lines, args)
			mu.Unlock()
		}
	}, funcr.Options{Verbosity: 4})
	ctx := klog.NewContext(context.Background(), logger)
	o := h.options()
	o.MaxAge = -1
	p := h.provider(o)
	logged := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(lines)
	}
	summary := func() {
		t.Helper()
		if _, err := p.Summary(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		summary()
	}
	if n := logged(); n != 1 {
		t.Fatalf("three rounds with the image filesystem missing logged %d lines at --v=4, want 1: %q", n, lines)
	}
	if !strings.Contains(lines[0], images) {
		t.Errorf("the line does not name the mount point %s: %s", images, lines[0])
	}
	// Readable again, then gone again: said again.
	if err := os.Mkdir(images, 0o755); err != nil {
		t.Fatal(err)
	}
	summary()
	if err := os.Remove(images); err != nil {
		t.Fatal(err)
	}
	summary()
	summary()
	if n := logged(); n != 2 {
		t.Fatalf("the filesystem missing again after a readable round logged %d lines in all, want 2", n)
	}
}
