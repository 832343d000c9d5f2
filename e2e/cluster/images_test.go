package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodekit/nodekit/internal/testenv"
)

// TestControlPlaneImage packs a static program as kubeadm's manifests run
// it — by its bare name, from the image's PATH — and refuses a dynamically
// linked one, which the one-binary image could not run.
func TestControlPlaneImage(t *testing.T) {
	if err := checkStatic(busyboxPath); err != nil {
		testenv.Unavailable(t, "a static busybox: %v", err)
	}
	dir := t.TempDir()
	// A static program under a control-plane name.
	bin := filepath.Join(dir, "kube-scheduler")
	data, err := os.ReadFile(busyboxPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	ref := "nodekit.local/kubeadm/kube-scheduler:v1.37.2"
	archive, err := ControlPlaneImage(bin, ref, dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg, files := readTestImage(t, archive, ref)
	if files["usr/local/bin/kube-scheduler"] == nil {
		t.Errorf("image files %v, want usr/local/bin/kube-scheduler", files)
	}
	if len(cfg.Entrypoint) != 0 || len(cfg.Cmd) != 0 {
		t.Errorf("entrypoint %q, command %q; want none (kubeadm's manifests give the command)", cfg.Entrypoint, cfg.Cmd)
	}
	if !slices.ContainsFunc(cfg.Env, func(e string) bool {
		path, ok := strings.CutPrefix(e, "PATH=")
		return ok && slices.Contains(filepath.SplitList(path), "/usr/local/bin")
	}) {
		t.Errorf("image environment %q: /usr/local/bin not on PATH", cfg.Env)
	}

	// A dynamically linked program: refused, named.
	dyn, err := exec.LookPath("ls")
	if err != nil {
		t.Fatal(err)
	}
	if checkStatic(dyn) == nil {
		testenv.Unavailable(t, "a dynamically linked program (%s is static)", dyn)
	}
	if _, err := ControlPlaneImage(dyn, "nodekit.local/kubeadm/ls:1", dir); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("image of the dynamically linked %s: err = %v, want it refused as dynamically linked", dyn, err)
	}
}
