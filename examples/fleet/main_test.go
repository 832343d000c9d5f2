package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestManifestsPrintTheDeployment(t *testing.T) {
	var out bytes.Buffer
	if err := manifests([]string{"--name=sim", "--namespace=ns", "--image=img:1", "--shards=2", "--nodes=5", "--args=--server=https://api:6443"}, &out); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, doc := range strings.Split(out.String(), "---\n")[1:] {
		var obj struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("document %q: %v", doc, err)
		}
		kinds = append(kinds, obj.Kind)
	}
	if got := strings.Join(kinds, ","); got != "ServiceAccount,ClusterRoleBinding,ClusterRoleBinding,ClusterRole,ClusterRoleBinding,ClusterRole,ClusterRoleBinding,StatefulSet" {
		t.Fatalf("kinds %s", got)
	}
	if !strings.Contains(out.String(), "--server=https://api:6443") || !strings.Contains(out.String(), "sim-1-0005") {
		t.Fatalf("manifests lack the shards' flag or the last node's name:\n%s", out.String())
	}
	if err := manifests([]string{"--name=sim"}, &out); err == nil {
		t.Fatal("manifests without an image succeeded")
	}
}

func TestRunRefusesNoNodes(t *testing.T) {
	if err := run(context.Background(), []string{"--nodes=0", "--shard=s", "--dir=" + t.TempDir()}); err == nil || !strings.Contains(err.Error(), "--nodes=0") {
		t.Fatalf("run --nodes=0: %v, want it refused", err)
	}
}

func TestRunRefusesABadMemoryFlag(t *testing.T) {
	for _, flag := range []string{"--memory-max=-1Gi", "--memory-max=lots", "--start-memory-per-node=-1"} {
		name, _, _ := strings.Cut(flag, "=")
		if err := run(context.Background(), []string{"--nodes=1", flag, "--shard=s", "--dir=" + t.TempDir()}); err == nil || !strings.Contains(err.Error(), name+"=") {
			t.Errorf("run %s: %v, want it refused", flag, err)
		}
	}
}

func TestMemoryBudget(t *testing.T) {
	for flag, want := range map[string]int64{"0": 0, "1Gi": 1 << 30, "512M": 512e6} {
		if got, err := memoryBudget(flag); err != nil || got != want {
			t.Errorf("memoryBudget(%q) = %d, %v, want %d", flag, got, err, want)
		}
	}
}

// TestContainerMemoryLimit: the lowest limit of the process's memory cgroup
// and its ancestors, under v2 and v1, "max" and v1's huge number read as no
// limit, and a v1 container's own cgroup at the mount's root found although
// /proc/self/cgroup names the host's path.
func TestContainerMemoryLimit(t *testing.T) {
	write := func(t *testing.T, root, dir, file, value string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, dir, file), []byte(value+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		files map[string]string // path under the mount → content
		self  string
		want  int64
	}{
		{
			name:  "v2, the container's limit",
			files: map[string]string{"kubepods/pod1/memory.max": "max", "kubepods/pod1/c1/memory.max": "1073741824"},
			self:  "0::/kubepods/pod1/c1\n", want: 1 << 30,
		},
		{
			name:  "v2, a parent's lower limit",
			files: map[string]string{"kubepods/pod1/memory.max": "536870912", "kubepods/pod1/c1/memory.max": "1073741824"},
			self:  "0::/kubepods/pod1/c1\n", want: 512 << 20,
		},
		{
			name:  "v2, no limit",
			files: map[string]string{"user.slice/memory.max": "max"},
			self:  "0::/user.slice\n", want: 0,
		},
		{
			name:  "v1, the container's own cgroup at the root",
			files: map[string]string{"memory/memory.limit_in_bytes": "268435456"},
			self:  "12:cpu,cpuacct:/kubepods/pod1/c1\n7:memory:/kubepods/pod1/c1\n", want: 256 << 20,
		},
		{
			name:  "v1, no limit",
			files: map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712", "memory/a/memory.limit_in_bytes": "9223372036854771712"},
			self:  "7:memory:/a\n", want: 0,
		},
		{name: "no memory cgroup", self: "3:cpu:/a\n", want: 0},
	} {
		root := t.TempDir()
		for p, v := range tc.files {
			write(t, root, filepath.Dir(p), filepath.Base(p), v)
		}
		got, err := containerMemoryLimit(root, []byte(tc.self))
		if err != nil || got != tc.want {
			t.Errorf("%s: containerMemoryLimit = %d, %v, want %d", tc.name, got, err, tc.want)
		}
	}
	root := t.TempDir()
	write(t, root, "a", "memory.max", "lots")
	if _, err := containerMemoryLimit(root, []byte("0::/a\n")); err == nil {
		t.Error("a malformed memory.max: no error")
	}
}
