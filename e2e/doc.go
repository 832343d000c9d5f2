// Package e2e holds nodekit's end-to-end tests: node agents built from
// examples/nodeagent run as separate processes against a real control plane
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler built from
// k8s.io/kubernetes) on 127.0.0.1, on containerd from Debian's packages and
// on the in-process fake runtime (runtime/fakecri). The harness they drive is
// package cluster; cmd/localcluster brings up the same cluster for a person.
//
// Run them with hack/test.sh (the whole suite) or, from this directory:
//
//	go test -count=1 -timeout=30m ./...
//
// The first run builds the control plane into $NODEKIT_CACHE (default
// ~/.cache/nodekit), about ten minutes on two cores. Tests that need root,
// containerd or the binaries skip with the reason outside CI and fail under
// CI=true, where nothing may skip silently. Set NODEKIT_E2E_KEEP=1 to keep the
// run's directory (certificates, kubeconfigs, every component's log).
package e2e
