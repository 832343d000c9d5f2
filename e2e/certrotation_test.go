package e2e

import (
	"context"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodekit/nodekit/e2e/cluster"
	"github.com/nodekit/nodekit/runtime/fakecri"
)

// rotationSigningDuration is the lifetime of the certificates the
// rotation test's controller manager issues. The signer backdates
// NotBefore by 5 minutes, so client-go's manager renews at 70–90 % of
// 6.5 minutes: between 27 s before and 51 s after the issue.
const rotationSigningDuration = 90 * time.Second

// TestClientCertificateRotationOnFakeCRI: a node joined by TLS bootstrap
// with rotateCertificates (and serverTLSBootstrap) on, on a control plane
// of its own whose controller manager signs for 90 seconds. The agent
// renews its client certificate with the certificate itself, stores the
// new pair, and moves its connections to it without a restart: its Lease
// keeps being renewed past the first certificate's expiry (after which
// the API server refuses that certificate), with no gap longer than the
// Lease's duration, and the node stays Ready. The serving certificate is
// requested and renewed beside it.
func TestClientCertificateRotationOnFakeCRI(t *testing.T) {
	t.Parallel()
	requireCluster(t)
	const name = "cert-rotation"
	ctx := t.Context()
	started := time.Now()
	cp, err := cluster.StartControlPlane(ctx, cluster.ControlPlaneOptions{
		Binaries:               env.bins,
		Dir:                    filepath.Join(env.dir, "controlplane-"+name),
		ClusterSigningDuration: rotationSigningDuration,
		Log:                    prefixWriter{os.Stderr, "e2e: " + name + ": "},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for component, path := range cp.LogFiles() {
				t.Logf("%s log: %s", component, path)
			}
		}
		if err := cp.Stop(); err != nil {
			t.Errorf("stop the control plane: %v", err)
		}
	})
	t.Logf("control plane up in %v", time.Since(started).Round(time.Millisecond))
	client := cp.Client()

	fake := fakecri.New(fakecri.Options{CgroupDriver: runtimeapi.CgroupDriver_CGROUPFS})
	endpoint, stopFake, err := fake.Start(filepath.Join(env.dir, "cri-"+name+".sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stopFake)
	bootstrapKubeconfig := filepath.Join(t.TempDir(), "bootstrap-kubelet.conf")
	if _, err := cp.BootstrapToken(ctx, bootstrapKubeconfig, time.Hour); err != nil {
		t.Fatal(err)
	}
	agent, err := cp.NewAgent(cluster.AgentOptions{
		Binary: env.agent, NodeName: name, RuntimeEndpoint: endpoint, CgroupDriver: "cgroupfs",
		KubeletConfig: map[string]any{"rotateCertificates": true, "serverTLSBootstrap": true},
		ExtraArgs:     []string{"--cgroups-per-qos=false", "--bootstrap-kubeconfig=" + bootstrapKubeconfig},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(agent.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	servingApproved := approveServingRequests(t, client, name)
	startAgentNode(t, agent)
	current := filepath.Join(agent.Dir, "root", "pki", "kubelet-client-current.pem")
	var first *x509.Certificate
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, readyTimeout, true, func(context.Context) (bool, error) {
		first = certOnDisk(current)
		return first != nil, nil
	})
	if err != nil {
		t.Fatalf("no client certificate in %s: %v", current, err)
	}
	if lifetime := first.NotAfter.Sub(first.NotBefore); lifetime > rotationSigningDuration+6*time.Minute {
		t.Fatalf("the bootstrap certificate lives %v: the controller manager did not sign for %v", lifetime, rotationSigningDuration)
	}
	t.Logf("bootstrap certificate serial %s, expires %v", first.SerialNumber, first.NotAfter.Format(time.RFC3339))

	// Watch the Lease until two renewal periods past the first
	// certificate's expiry: with the expired certificate on its
	// connections the agent could not renew it.
	leases := client.CoordinationV1().Leases(v1.NamespaceNodeLease)
	var last, maxGapFrom time.Time
	var maxGap time.Duration
	end := first.NotAfter.Add(20 * time.Second)
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Until(end)+time.Minute, true, func(ctx context.Context) (bool, error) {
		lease, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil || lease.Spec.RenewTime == nil {
			return false, nil
		}
		renewed := lease.Spec.RenewTime.Time
		if !renewed.After(last) {
			return false, nil
		}
		if !last.IsZero() && renewed.Sub(last) > maxGap {
			maxGap, maxGapFrom = renewed.Sub(last), last
		}
		last = renewed
		return renewed.After(end), nil
	})
	if err != nil {
		t.Fatalf("Lease %s not renewed after %v (the first certificate expired at %v; last renewal %v): %v", name, end, first.NotAfter, last, err)
	}
	leaseDuration := 40 * time.Second // the KubeletConfiguration's default
	t.Logf("Lease renewed until %v; longest gap between renewals %v (from %v)", last.Format(time.RFC3339), maxGap, maxGapFrom.Format(time.RFC3339))
	if maxGap >= leaseDuration {
		t.Errorf("the Lease went %v without renewal from %v, past its duration %v", maxGap, maxGapFrom, leaseDuration)
	}

	renewed := certOnDisk(current)
	if renewed == nil || renewed.SerialNumber.Cmp(first.SerialNumber) == 0 || !renewed.NotAfter.After(first.NotAfter) {
		t.Fatalf("%s still holds the bootstrap certificate (serial %s) after its expiry", current, first.SerialNumber)
	}
	t.Logf("current client certificate serial %s, expires %v", renewed.SerialNumber, renewed.NotAfter.Format(time.RFC3339))

	csrs := nodeClientCSRsOf(t, client, name)
	byNode := 0
	for _, c := range csrs {
		if c.Spec.Username == "system:node:"+name && len(c.Status.Certificate) > 0 {
			byNode++
		}
	}
	if len(csrs) < 2 || byNode == 0 {
		t.Errorf("%d client certificate requests, %d of them made and issued with the node's own certificate; want the bootstrap one and at least one renewal by system:node:%s", len(csrs), byNode, name)
	}
	if n := servingApproved.Load(); n < 2 {
		t.Errorf("%d serving certificate requests approved, want the first and at least one renewal (serverTLSBootstrap beside client rotation)", n)
	}
	if log, err := os.ReadFile(agent.LogPath); err != nil || !strings.Contains(string(log), "Certificate rotation detected") {
		t.Errorf("the agent's log does not say it moved its connections to the renewed certificate (%v)", err)
	}
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !isReady(node) {
		t.Errorf("node %s not Ready after the rotation: %s", name, describeNode(node))
	}
	t.Logf("%d client certificate requests, %d serving ones approved, in %v", len(csrs), servingApproved.Load(), time.Since(started).Round(time.Second))
}

// certOnDisk is the first certificate in the PEM file at path; nil when
// there is none.
func certOnDisk(path string) *x509.Certificate {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	certs, err := certutil.ParseCertsPEM(data)
	if err != nil || len(certs) == 0 {
		return nil
	}
	return certs[0]
}

// nodeClientCSRsOf is nodeClientCSRs on another control plane's client.
func nodeClientCSRsOf(t *testing.T, client kubernetes.Interface, name string) []certificatesv1.CertificateSigningRequest {
	t.Helper()
	list, err := client.CertificatesV1().CertificateSigningRequests().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []certificatesv1.CertificateSigningRequest
	for _, c := range list.Items {
		if c.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
			continue
		}
		if req := pemBlock(c.Spec.Request); req != nil && req.Subject.CommonName == "system:node:"+name {
			out = append(out, c)
		}
	}
	return out
}

// approveServingRequests approves node name's kubelet-serving requests,
// as an operator's approver would, until the test ends, and counts them.
func approveServingRequests(t *testing.T, client kubernetes.Interface, name string) *atomic.Int32 {
	var approved atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		csrs := client.CertificatesV1().CertificateSigningRequests()
		_ = wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			list, err := csrs.List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for i := range list.Items {
				csr := &list.Items[i]
				if csr.Spec.SignerName != certificatesv1.KubeletServingSignerName || csr.Spec.Username != "system:node:"+name || decided(csr) {
					continue
				}
				csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
					Type: certificatesv1.CertificateApproved, Status: v1.ConditionTrue,
					Reason: "NodekitE2EApprove", Message: "the e2e test's serving CSR approver",
				})
				if _, err := csrs.UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err == nil {
					approved.Add(1)
				}
			}
			return false, nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return &approved
}
