// Package conformance runs upstream Kubernetes' end-to-end tests (e2e.test
// and ginkgo built from the pinned k8s.io/kubernetes) against one node run
// by nodekit's agent and one run by the upstream kubelet, each on a fresh
// containerd under the same local control plane (package cluster), and
// compares the results test by test. The test images are built locally
// (cluster.BuildTestImage), renamed with the framework's
// KUBE_TEST_REPO_LIST into a registry the run serves on loopback, which
// serves the pulls with policy Always, and imported into each containerd;
// tests that need several nodes, a cloud, DNS or a service proxy fail on
// both agents and are reported as such. cmd/conformance is its command
// line.
package conformance
