// Package certificate is the node's client certificate: TLS bootstrap
// (kubelet --bootstrap-kubeconfig), as the kubelet's
// pkg/kubelet/certificate/bootstrap does it.
//
// Bootstrap runs before the agent builds its API clients. When the
// kubeconfig (--kubeconfig) exists and its client certificate is not
// expired, it does nothing. Otherwise it reuses a valid key pair already
// in the certificate directory, or requests one: it makes (or reuses, after
// a restart) the private key kubelet-client.key.tmp, sends a
// CertificateSigningRequest for CN system:node:<node>, O system:nodes to
// the signer kubernetes.io/kube-apiserver-client-kubelet with the
// bootstrap kubeconfig's credentials (a bootstrap token, typically),
// waits until it is approved and issued, stores the pair as
// kubelet-client-<timestamp>.pem with the kubelet-client-current.pem
// symlink (client-go's certificate file store, mode 0600), and writes the
// kubeconfig pointing at that symlink.
//
// Rotation (rotateCertificates) is the kubelet's
// pkg/kubelet/certificate: NewClientRotation is client-go's certificate
// manager renewing the pair in the certificate directory, and
// UpdateTransport the transport of the agent's clients, which presents
// the manager's current certificate in each handshake and closes every
// connection when it changes, so the next request uses the renewed
// certificate; its Run fails once the certificate has expired with the
// API server answering, for the agent to exit and bootstrap afresh.
//
// There is nothing to swap: an embedder that gets its credentials another
// way does not call Bootstrap.
package certificate
