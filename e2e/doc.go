// Package e2e holds nodekit's end-to-end tests: node agents built from
// examples/nodeagent run as separate processes against a real control plane
// (etcd, kube-apiserver, kube-controller-manager, kube-scheduler built from
// k8s.io/kubernetes) on 127.0.0.1, on containerd from Debian's packages and
// on the in-process fake runtime (runtime/fakecri). The harness they drive is
// package cluster; cmd/localcluster brings up the same cluster for a person.
// Most tests give their node a containerd and a cgroup root of its own (two
// agents on one runtime would remove each other's pods), and each prints its
// figures. What they check today, by file:
//
//   - Nodes (nodes_test.go, node_lifecycle_test.go, nodestatus_test.go):
//     registration and Ready on containerd with the runtime, OS and kernel
//     kubectl shows, NotReady with the runtime's reason when the pod network
//     is unconfigured or containerd stopped, and Ready again; the Lease
//     renewed every 10 s; the status patched only on change or at the report
//     period; writes only as the node's own identity; a stopped agent's node
//     marked Unknown and tainted unreachable by the controller manager; a
//     foreign condition (node-problem-detector's) kept through the agent's
//     patches.
//   - Pods (pods_test.go, podspec_test.go, probes_test.go): one table of pod
//     lifecycle tests on a fakecri node and on a containerd node (among
//     them container restart rules, sysctls, activeDeadlineSeconds and the
//     admission of specs the node cannot run); no pod status patch while
//     pods idle; the probe scenarios (exec, httpGet,
//     tcpSocket, grpc; liveness, readiness, startup) on containerd.
//   - Volumes and storage (volumes_test.go, storage_test.go, csi_test.go,
//     csi_volumes_test.go): configMap and secret files and env (an edited
//     configMap reaching the running container, a subPath that does not
//     follow), a projected service-account token passing TokenReview, the
//     downward API, a Memory emptyDir as tmpfs, a PVC pod stuck with
//     FailedMount, claims bound to hostPath and local PVs (from the pod
//     tests' table), kubectl debug, termination messages, log rotation and
//     the image garbage collector (TestImageGCOnContainerd); the e2e CSI
//     driver registered through plugins_registry (CSINode, node ID
//     annotation, topology) and its volumes: a StatefulSet on static PVs
//     across a pod's deletion and the agent's SIGKILL, inline and generic
//     ephemeral volumes, a driver killed mid-way; TestCSINodeOperations
//     (csi_node_test.go) plays the external attacher (status.attached on
//     the attach/detach controller's VolumeAttachment) and the
//     external-resizer (PV capacity and the claim's resize status) and
//     fails and removes a driver beside running pods;
//     TestCSIHandoverFromKubelet (csi_handover_test.go) hands an attached
//     CSI volume the upstream kubelet mounted over to an agent (no
//     remount, volumesInUse kept in every node status).
//   - Devices (devices_test.go): the e2e module's sample device plugin's
//     devices in capacity and allocatable, allocated to a pod, and dropped
//     from allocatable when the plugin dies, registered again when it
//     restarts; the pod resources API (List, Get, GetAllocatableResources)
//     reporting them, before and after the agent's SIGKILL and restart.
//   - Eviction (eviction_test.go): memory pressure set relative to the
//     host's memory: MemoryPressure with the kubelet's reason, a new
//     BestEffort pod rejected, the running BestEffort pod evicted before
//     the Guaranteed one, the condition cleared after the transition
//     period, and an emptyDir over its sizeLimit evicted. PID pressure
//     (pidpressure_test.go) set relative to the host's free PIDs:
//     PIDPressure and its taint, the pod with the most processes evicted,
//     the condition cleared. Disk pressure (diskpressure_test.go) on a node
//     whose root directory is a tmpfs of its own: DiskPressure and its
//     taint, the pod that filled an emptyDir evicted, the condition
//     cleared, the node's images all kept.
//   - The node API (nodeapi_test.go): an agent whose address sits on a veth
//     of a network namespace, with a serving certificate from an approved
//     kubelet-serving CSR, driven by kubectl (logs, exec, attach,
//     port-forward, cp, top through a metrics-server built from Go modules,
//     get --raw through nodes/proxy) and its stats and metrics endpoints.
//   - Static pods (staticpods_test.go, staticrestart_test.go): static pods
//     with the API server unreachable, then their mirror pods, a deleted
//     mirror pod coming back, an edited manifest replacing its pod, a
//     manifest URL adding and removing pods; a manifest moved out and back
//     while its pod still stops runs again. Standalone on containerd
//     (standalone_test.go): no kubeconfig, a static pod runs, the read-only
//     port's /pods lists it, removing its manifest stops it.
//   - Joining and handover (bootstrap_test.go, handover_test.go): TLS
//     bootstrap as kubeadm join does it (a bootstrap token, the certificate
//     approved and issued by the controller manager, no new request on a
//     restart); the upstream kubelet (built into the cache on first use)
//     replaced by an agent that adopts its containers, static pods and
//     mirror pods (the same UIDs) without a restart;
//     `kubeadm join` itself bringing in a nodekit worker (kubeadm_test.go,
//     in a mount namespace of its own, cluster.NodeRoot); the client
//     certificate rotated under a 90 s signing duration with the Lease
//     renewed throughout (certrotation_test.go, a control plane of its own).
//   - A pod-level backend (podlevel_test.go): examples/podsim runs a
//     Deployment's and a Job's pods.
//   - README's claims (claims_test.go): a native sidecar started before the
//     main container, hostPath directories, a tcpSocket readiness probe,
//     imagePullSecrets against a loopback registry that wants credentials
//     (pullsecret_test.go).
//   - Reliability (reliability_*_test.go), one fault each: the agent
//     SIGKILLed and restarted with its pods changed meanwhile
//     (TestAgentCrashRestart), the API server cut off for two minutes
//     through a proxy of that node only (TestAPIServerOutage), containerd
//     stopped and frozen (TestRuntimeOutageAndHang), SIGTERM
//     (TestGracefulShutdownAndFiles, with the modes of the agent's files),
//     SIGPWR with shutdownGracePeriod and --node-shutdown-signal
//     (TestGracefulNodeShutdown), pods the node cannot or can barely run
//     (TestHostileInput), pods created and deleted in rounds (TestChurn:
//     short here; 2,000 × 5 on fakecri and 200 × 5 on containerd under
//     NODEKIT_SOAK=1, which hack/soak.sh sets, not part of hack/test.sh).
//   - Least privilege (privilege_*_test.go): an agent given another node's
//     name is refused every write, logs it with the object's name and backs
//     off while its healthz and static pod keep being served
//     (TestWriteToAnotherNodeIsRefused); the modes of the serving
//     certificate and the pod directories (TestAgentFileModes).
//   - Conformance (conformance_test.go): TestConformanceSubset runs a
//     subset of upstream's [sig-node] [Conformance] tests with e2e.test
//     against one nodekit node under a control plane of its own, before
//     the parallel tests.
//
// Package kubeletparity needs no cluster: it compares nodekit's functions
// (the container hash, the configuration defaults) with the kubelet's own.
// Measurements that assert nothing (idle CPU with a component off, say) are
// not tests here: cmd/nodebench makes them.
//
// After the tests, whatever -run selected, TestMain checks least privilege
// from the apiserver's audit log (privilege_test.go): every request of a
// node identity (system:node:<name>) must be one the kubelet makes, on its
// own Node, Lease, pods and objects of its pods, with none refused except
// those a test provokes on purpose (excuseDenials, which also covers a
// test's own kubectl with a node's credentials) and a refusal of an object
// the same node is granted within seconds (the Node authorizer's graph
// learns a just-bound pod's secrets and configmaps from its own informer;
// the kubelet meets the same race); the apiserver must run
// --authorization-mode=Node,RBAC and NodeRestriction (read from its command
// line, and proved by a probe identity refused reading and patching
// another node), and every node CSR must ask for its own identity. It
// prints the node identities' requests by verb and resource, and fails the
// run, listing the offending requests, otherwise. All tests but the
// conformance subset run in parallel (-parallel defaults to 16 here: they
// wait on the cluster, not on the CPU).
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
