package main

import (
	"bytes"
	"context"
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

func TestRunRefusesNegativeMemoryPerNode(t *testing.T) {
	for _, flag := range []string{"--memory-per-node", "--start-memory-per-node"} {
		if err := run(context.Background(), []string{"--nodes=1", flag + "=-1", "--shard=s", "--dir=" + t.TempDir()}); err == nil || !strings.Contains(err.Error(), flag+"=") {
			t.Errorf("run %s=-1: %v, want it refused", flag, err)
		}
	}
}
