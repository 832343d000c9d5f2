// Package cluster is nodekit's end-to-end harness: it builds and runs a real
// Kubernetes control plane, the containerd runtime and nodekit node agents on
// this machine, for the e2e tests and for cmd/localcluster.
//
// Everything listens on loopback only. The control plane (StartControlPlane)
// is etcd, kube-apiserver, kube-controller-manager and kube-scheduler on free
// ports of 127.0.0.1, with a fresh CA (PKI), RBAC, the Node authorizer,
// NodeRestriction admission and an audit log; its binaries come from
// BuildControlPlane, which builds them with the go command from the versions
// e2e/tools pins and caches them by version. Each node agent (NewAgent) runs
// examples/nodeagent (BuildAgent) with kubelet flags, a KubeletConfiguration
// file and its own client certificate (system:node:<name>), on its own
// address 127.0.0.N. StartContainerd runs containerd 2 and runc, built from
// the Go modules e2e/tools pins and cached like the control plane
// (BuildContainerd2, with crictl), or Debian's containerd 1.6 and runc
// (ContainerdOptions.Series, $NODEKIT_E2E_CONTAINERD), with all state
// under a temporary directory, CDI specs read from its CDISpecDir (2 only)
// and locally built images (PauseImage, BusyboxImage); Close removes every
// trace of it. kubeadm
// (BuildKubeadm) runs against the same control plane; a node it sets up
// lives in a NodeRoot, a private mount namespace whose /etc/kubernetes and
// /var/lib/kubelet are the test's, and its agent runs with the command
// line kubeadm's files give it (NewCommandAgent).
//
// Every server, daemon and agent is a child process in its own process group,
// killed if the harness process dies; its output goes to a log file whose
// path errors and accessors name. Stop, Close and Agent.Stop end them by
// PID. Nothing here is safe to run against a real machine's runtime: the
// harness only ever touches the directories it created, plus the few host
// paths containerd insists on (shim sockets under /run/containerd/s, CNI
// results), which it cleans.
package cluster
