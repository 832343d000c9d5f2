// Package kubeletparity holds tests that compare nodekit's functions with
// the upstream kubelet's own (k8s.io/kubernetes v1.37.2, which only this
// module may import): where a cluster or a node could tell the two apart by a
// value nodekit computes (a container's hash, a defaulted configuration), the
// test runs both on the same inputs and requires the same result. The tests
// need no cluster and no root; they run with
//
//	go test ./kubeletparity/
package kubeletparity
