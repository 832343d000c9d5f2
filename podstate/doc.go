// Package podstate holds the runtime-neutral state of pods and containers
// that several nodekit modules read: the pod lifecycle loop (pods), the pod
// status generator (status/podstatus), the prober and the CRI backend
// (runtime). It is a leaf: it imports only k8s.io/api and
// k8s.io/apimachinery types, never grpc, the CRI or another nodekit
// package, so reading pod state never pulls a module's dependencies.
//
// restart.go holds the restart decision (ContainerShouldRestart with the
// container's restartPolicy and restartPolicyRules, ShouldContainerBeRestarted)
// that the runtime, the status generator and the prober all ask, so they
// cannot disagree about whether a container runs again.
//
// The types are plain values. A value handed from one module to another is
// a snapshot owned by the receiver; nothing mutates it after it is handed
// over.
package podstate
