package cluster

import (
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// BootstrapTokenGroup is the group kubeadm's default node bootstrap tokens
// authenticate with, besides system:bootstrappers.
const BootstrapTokenGroup = "system:bootstrappers:kubeadm:default-node-token"

// bootstrapBindings are the ClusterRoleBindings kubeadm creates for TLS
// bootstrap: bootstrappers may create CSRs, and the controller manager's
// csrapproving controller approves their first client certificate and the
// nodes' renewals.
var bootstrapBindings = map[string]rbacv1.Subject{
	"kubeadm:kubelet-bootstrap":                     {Kind: rbacv1.GroupKind, Name: BootstrapTokenGroup},
	"kubeadm:node-autoapprove-bootstrap":            {Kind: rbacv1.GroupKind, Name: BootstrapTokenGroup},
	"kubeadm:node-autoapprove-certificate-rotation": {Kind: rbacv1.GroupKind, Name: "system:nodes"},
}

var bootstrapRoles = map[string]string{
	"kubeadm:kubelet-bootstrap":                     "system:node-bootstrapper",
	"kubeadm:node-autoapprove-bootstrap":            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
	"kubeadm:node-autoapprove-certificate-rotation": "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
}

// BootstrapToken makes a bootstrap token as kubeadm does (a
// bootstrap.kubernetes.io/token Secret in kube-system, valid for ttl, in
// BootstrapTokenGroup), ensures kubeadm's bootstrap RBAC bindings exist,
// and writes a bootstrap kubeconfig with it at path, as kubeadm's
// bootstrap-kubelet.conf. It returns the token.
func (c *ControlPlane) BootstrapToken(ctx context.Context, path string, ttl time.Duration) (string, error) {
	for name, subject := range bootstrapBindings {
		crb := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: bootstrapRoles[name]},
			Subjects:   []rbacv1.Subject{subject},
		}
		if _, err := c.client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("bootstrap token: create ClusterRoleBinding %s: %w", name, err)
		}
	}
	id, secret := randomToken(6), randomToken(16)
	s := &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: metav1.NamespaceSystem},
		Type:       v1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"token-id":                       id,
			"token-secret":                   secret,
			"expiration":                     time.Now().Add(ttl).UTC().Format(time.RFC3339),
			"usage-bootstrap-authentication": "true",
			"usage-bootstrap-signing":        "true",
			"auth-extra-groups":              BootstrapTokenGroup,
		},
	}
	if _, err := c.client.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("bootstrap token: create secret %s: %w", s.Name, err)
	}
	token := id + "." + secret
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubernetes"] = &clientcmdapi.Cluster{Server: c.Server, CertificateAuthorityData: c.PKI.ca.certPEM}
	cfg.AuthInfos["tls-bootstrap-token-user"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["tls-bootstrap-token-user@kubernetes"] = &clientcmdapi.Context{Cluster: "kubernetes", AuthInfo: "tls-bootstrap-token-user"}
	cfg.CurrentContext = "tls-bootstrap-token-user@kubernetes"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("bootstrap token: write %s: %w", path, err)
	}
	return token, nil
}

// randomToken is n characters of [a-z0-9], the bootstrap token alphabet.
func randomToken(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	var sb strings.Builder
	for _, c := range b {
		sb.WriteByte(alphabet[int(c)%len(alphabet)])
	}
	return sb.String()
}
