package e2e

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/e2e/cluster"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// TestTLSBootstrapOnFakeCRI joins a node as `kubeadm join` does: the agent
// has no client certificate, only a bootstrap kubeconfig with a bootstrap
// token (and kubeadm's RBAC bindings for bootstrappers). It must request
// its client certificate from the kubelet signer, have it approved by the
// controller manager's csrapproving controller and issued by csrsigning,
// store it under the kubelet's file names, write its kubeconfig and
// register the node, which becomes Ready. A restart with the certificate
// in place makes no new request.
func TestTLSBootstrapOnFakeCRI(t *testing.T) {
	t.Parallel()
	const name = "tls-bootstrap"
	ctx := t.Context()
	fake := fakecri.New(fakecri.Options{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS})
	endpoint, stopFake, err := fake.Start(filepath.Join(env.dir, "cri-"+name+".sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopFake)
	bootstrapKubeconfig := filepath.Join(t.TempDir(), "bootstrap-kubelet.conf")
	if _, err := env.cp.BootstrapToken(ctx, bootstrapKubeconfig, time.Hour); err != nil {
		t.Fatal(err)
	}
	agent, err := env.cp.NewAgent(cluster.AgentOptions{
		Binary: env.agent, NodeName: name, RuntimeEndpoint: endpoint, CgroupDriver: "cgroupfs",
		ExtraArgs: []string{"--cgroups-per-qos=false", "--bootstrap-kubeconfig=" + bootstrapKubeconfig},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The node has no credentials of its own, as a machine kubeadm joins.
	if err := os.Remove(agent.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	startAgentNode(t, agent)
	waitForNode(t, name, "Ready", readyTimeout, isReady)
	t.Logf("node Ready %v after the agent started with a bootstrap token only", time.Since(started).Round(time.Millisecond))

	csrs := nodeClientCSRs(t, name)
	if len(csrs) != 1 {
		t.Fatalf("%d client certificate requests for %s, want 1", len(csrs), name)
	}
	csr := csrs[0]
	if csr.Spec.Username != "system:bootstrap:"+tokenID(t, bootstrapKubeconfig) {
		t.Errorf("the request was made by %q, want the bootstrap token's user", csr.Spec.Username)
	}
	approved := false
	for _, c := range csr.Status.Conditions {
		approved = approved || (c.Type == certificatesv1.CertificateApproved && c.Status == v1.ConditionTrue && c.Reason == "AutoApproved")
	}
	if !approved || len(csr.Status.Certificate) == 0 {
		t.Errorf("request %s: conditions %+v, %d bytes of certificate; want auto-approved by the controller manager and issued", csr.Name, csr.Status.Conditions, len(csr.Status.Certificate))
	}
	current := filepath.Join(agent.Dir, "root", "pki", "kubelet-client-current.pem")
	fi, err := os.Stat(current)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s mode %v, want 0600", current, fi.Mode().Perm())
	}
	kc, err := clientcmd.LoadFromFile(agent.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if auth := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo]; auth.ClientCertificate != current {
		t.Errorf("the written kubeconfig's client certificate is %s, want %s", auth.ClientCertificate, current)
	}

	// A restart with a valid certificate skips the bootstrap.
	if err := agent.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := agent.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitForNode(t, name, "Ready after the restart", readyTimeout, isReady)
	if n := len(nodeClientCSRs(t, name)); n != 1 {
		t.Errorf("%d client certificate requests after a restart with a valid certificate, want still 1", n)
	}
}

// nodeClientCSRs are the kubelet client certificate requests of node name.
func nodeClientCSRs(t *testing.T, name string) []certificatesv1.CertificateSigningRequest {
	t.Helper()
	list, err := env.cp.Client().CertificatesV1().CertificateSigningRequests().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []certificatesv1.CertificateSigningRequest
	for _, c := range list.Items {
		if c.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
			continue
		}
		req := pemBlock(c.Spec.Request)
		if req != nil && req.Subject.CommonName == "system:node:"+name {
			out = append(out, c)
		}
	}
	return out
}

// tokenID is the ID of the bootstrap token in the kubeconfig at path.
func tokenID(t *testing.T, path string) string {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tok := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo].Token
	if len(tok) < 6 {
		t.Fatalf("no bootstrap token in %s", path)
	}
	return tok[:6]
}

// pemBlock parses a PEM certificate request; nil when it is not one.
func pemBlock(data []byte) *x509.CertificateRequest {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil
	}
	return req
}
