package cluster

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestControlPlaneServesNodeIdentities builds (or reuses) the control plane,
// starts it and checks the version it reports, that a node certificate
// authenticates as system:node:<name> in system:nodes, and that the Node
// authorizer keeps that identity away from other nodes' objects.
func TestControlPlaneServesNodeIdentities(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Minute)
	defer cancel()
	bins, err := BuildControlPlane(ctx, BuildOptions{Log: testLog{t}})
	if err != nil {
		requireOrSkip(t, err)
	}
	cp, err := StartControlPlane(ctx, ControlPlaneOptions{Binaries: bins, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	dir := cp.Dir
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("Stop left %s behind", dir)
		}
	})

	info, err := cp.Client().Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if info.GitVersion != bins.KubernetesVersion {
		t.Errorf("apiserver reports %s, want %s (version ldflags)", info.GitVersion, bins.KubernetesVersion)
	}
	out, err := cp.Kubectl(ctx, cp.AdminKubeconfig, "version", "--client")
	if err != nil || !strings.Contains(out, bins.KubernetesVersion) {
		t.Errorf("kubectl version --client = %q, %v; want %s", out, err, bins.KubernetesVersion)
	}

	kubeconfig, err := cp.NodeCredentials("node-a", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	node := kubernetes.NewForConfigOrDie(cfg)
	review, err := node.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	user := review.Status.UserInfo
	if user.Username != "system:node:node-a" || !contains(user.Groups, "system:nodes") {
		t.Errorf("node credentials authenticate as %s %v, want system:node:node-a in system:nodes", user.Username, user.Groups)
	}
	_, err = node.CoordinationV1().Leases("kube-node-lease").Get(ctx, "node-b", metav1.GetOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("node-a reading node-b's Lease: got %v, want Forbidden", err)
	}
	if ip1, ip2 := cp.AllocateNodeIP(), cp.AllocateNodeIP(); ip1 != "127.0.0.2" || ip2 != "127.0.0.3" {
		t.Errorf("node IPs %s, %s; want 127.0.0.2, 127.0.0.3", ip1, ip2)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
