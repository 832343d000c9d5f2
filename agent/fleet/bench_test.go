package fleet

import (
	"os"
	"path/filepath"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/mount-utils"

	"github.com/nodekit/nodekit/agent"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// BenchmarkNewNode builds (agent.New, without starting) the agent of a
// fleet's second node as startNode builds it: its configuration, the
// fleet's options, the node as its lifecycle. What every agent of a fleet
// but the first allocates before it starts; BenchmarkNew in ./agent builds
// a standalone agent with its node API instead.
//
//	go test -run '^$' -bench '^BenchmarkNewNode$' -benchtime=200x ./agent/fleet
func BenchmarkNewNode(b *testing.B) {
	dir := b.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		b.Fatal(err)
	}
	opts := Options{Names: []string{"a", "b"}, Dir: dir, Kubeconfig: func(int) string { return kubeconfig }}
	cri := fakecri.New(fakecri.Options{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS})
	mounter := mount.New("")
	const i = 1
	b.ReportAllocs()
	for b.Loop() {
		cfg, err := nodeConfig(opts, i, filepath.Join(dir, opts.Names[i]), inProcessEndpoint+opts.Names[i])
		if err != nil {
			b.Fatal(err)
		}
		n := newNode(opts.Names[i], nil)
		if err := agent.New(cfg, append(nodeOptions(opts, i, cri, mounter), n.options())...).Err(); err != nil {
			b.Fatal(err)
		}
	}
}
