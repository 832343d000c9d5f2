package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUnescapeMountPath(t *testing.T) {
	for in, want := range map[string]string{
		"/tmp/plain":          "/tmp/plain",
		`/tmp/with\040space`:  "/tmp/with space",
		`/tmp/tab\011and\134`: "/tmp/tab\tand\\",
		`/tmp/short\04`:       `/tmp/short\04`,
	} {
		if got := unescapeMountPath(in); got != want {
			t.Errorf("unescapeMountPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestVersionLDFlagsStampBothVersionPackages(t *testing.T) {
	flags := versionLDFlags("v1.37.2")
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		for _, kv := range []string{".gitVersion=v1.37.2", ".gitMajor=1", ".gitMinor=37", ".gitTreeState=clean"} {
			if !strings.Contains(flags, "-X "+pkg+kv) {
				t.Errorf("ldflags %q lack -X %s%s", flags, pkg, kv)
			}
		}
	}
}

func TestPinnedVersions(t *testing.T) {
	write := func(t *testing.T, k8sEtcd, etcd string) string {
		t.Helper()
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "etcd"), 0o755); err != nil {
			t.Fatal(err)
		}
		tools := "module tools\n\nrequire (\n\tk8s.io/kubernetes v1.37.2\n\tgo.etcd.io/etcd/api/v3 " + k8sEtcd + " // indirect\n)\n"
		etcdMod := "module etcd\n\nrequire go.etcd.io/etcd/server/v3 " + etcd + "\n"
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(tools), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "etcd", "go.mod"), []byte(etcdMod), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	k8s, etcd, err := pinnedVersions(write(t, "v3.7.0", "v3.7.0"))
	if err != nil || k8s != "v1.37.2" || etcd != "v3.7.0" {
		t.Errorf("pinnedVersions = %q, %q, %v; want v1.37.2, v3.7.0", k8s, etcd, err)
	}
	if _, _, err := pinnedVersions(write(t, "v3.7.0", "v3.6.1")); err == nil || !strings.Contains(err.Error(), "update e2e/tools/etcd/go.mod") {
		t.Errorf("mismatched etcd pins: got %v, want an error asking to update e2e/tools/etcd", err)
	}
	if _, _, err := pinnedVersions(t.TempDir()); err == nil {
		t.Error("missing go.mod: want an error")
	}
}

func TestFlagValue(t *testing.T) {
	args := []string{"containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", "abc", "-address=/run/x.sock"}
	for flag, want := range map[string]string{"-namespace": "k8s.io", "-id": "abc", "-address": "/run/x.sock", "-debug": ""} {
		if got := flagValue(args, flag); got != want {
			t.Errorf("flagValue(%s) = %q, want %q", flag, got, want)
		}
	}
}
