// Package lease keeps a node's heartbeat Lease renewed, as the kubelet's
// node lease controller does.
//
// A Controller owns the Lease kube-node-lease/<node name>
// (coordination.k8s.io/v1). Run writes spec.renewTime at once and then every
// renew interval, 10 s with the defaults (40 s lease duration × 0.25), plus
// up to 4% jitter, measured from the end of the previous renewal. The node
// lifecycle controller marks the node NotReady when the lease is not renewed
// for its duration. The API traffic is the kubelet's:
//
//   - A renewal is one UPDATE from the lease the controller last wrote, with
//     no GET. Only renewTime changes, plus holderIdentity and
//     leaseDurationSeconds when they differ from Options.
//   - When that fails, or on the first renewal, the controller GETs the lease
//     and CREATEs it when it does not exist, retrying with back-off (100 ms
//     doubling to 7 s) until it succeeds or Run is stopped. A lease read back
//     is then UPDATEd, up to 5 times per cycle; a Conflict re-reads it first.
//     Options.OnRepeatedFailure runs for every failed retry after the first
//     (the kubelet drops its heartbeat connections there).
//   - The lease carries an owner reference to its Node (so deleting the Node
//     deletes the lease). A lease is never created without it: while the
//     Node cannot be read, creation backs off. An existing lease without one
//     gets it on the first renewal that can read the Node; renewals never
//     wait for the Node.
//
// Unlike the component-helpers controller, the first back-off sleep is
// 100 ms (not 200 ms), an UPDATE answered with NotFound goes straight to
// re-creating the lease instead of retrying the UPDATE, and a Node that
// cannot be read does not block a renewal.
//
// # Metrics
//
// Registered on Options.Registerer when it is set (the kubelet has no lease
// metrics, so the names are nodekit's):
//
//   - nodekit_node_lease_renewals_total (counter): successful writes
//     (create or update) of the lease.
//   - nodekit_node_lease_renewal_failures_total{operation} (counter): failed
//     API requests; operation is get, create or update (the lease) or
//     get_node (reading the Node for the owner reference).
//   - nodekit_node_lease_renew_duration_seconds (histogram): how long a
//     renew cycle took until the lease was written, retries and back-off
//     included.
//   - nodekit_node_lease_last_renew_timestamp_seconds (gauge): the Unix time
//     of the last successful write; alert when it falls behind by more than
//     the lease duration.
//
// # Swapping pieces
//
// Without fx, build a Controller with New and call Run. With fx, Module
// provides the *Controller from the lease.Options in the graph and runs it
// for the application's lifetime; Options fields left zero take the graph's
// kubernetes.Interface, clock.Clock and prometheus.Registerer. An embedder
// changes the heartbeat by decorating the Options, e.g. another holder
// identity or a shorter lease:
//
//	fx.Decorate(func(o lease.Options) lease.Options {
//		o.LeaseDurationSeconds = 20
//		return o
//	})
//
// and swaps its clock or client for this module alone by wrapping it with
// fx.Decorate of clock.Clock or kubernetes.Interface in an enclosing
// fx.Module (the agent does so to give it the heartbeat client). An agent
// that renews the lease some other way leaves Module out of its graph.
package lease
