package cluster

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

const metricsServerModule = "sigs.k8s.io/metrics-server"

// BuildMetricsServer returns metrics-server (sigs.k8s.io/metrics-server, at
// the version e2e/tools/metricsserver/go.mod pins), building it with the go
// command into the cache directory when the cache does not hold it, as
// BuildControlPlane does for the control plane (a few minutes cold).
func BuildMetricsServer(ctx context.Context, opts BuildOptions) (string, error) {
	opts, goBin, err := opts.complete()
	if err != nil {
		return "", err
	}
	_, bins, err := buildPinned(ctx, opts, goBin, pinnedTool{
		dir: "metricsserver", module: metricsServerModule, name: "metrics-server",
		pkgs: []string{metricsServerModule + "/cmd/metrics-server"},
		// Static, as upstream's image holds it.
		env: []string{"CGO_ENABLED=0"},
	})
	if err != nil {
		return "", err
	}
	return bins[0], nil
}

// MetricsServerOptions configure StartMetricsServer.
type MetricsServerOptions struct {
	// Binary is metrics-server (BuildMetricsServer). Required.
	Binary string
	// NodeSelector limits the nodes it scrapes (--node-selector), e.g.
	// "kubernetes.io/hostname=ctr-api"; empty scrapes every node.
	NodeSelector string
	// Resolution is --metric-resolution (default 15s, at least 10s).
	Resolution time.Duration
	// Timeout bounds the wait for the APIService to turn Available
	// (default 3 minutes).
	Timeout time.Duration
}

// MetricsServer is a running metrics-server registered as the
// v1beta1.metrics.k8s.io APIService.
type MetricsServer struct {
	// LogPath is its log.
	LogPath string

	cp   *ControlPlane
	proc *process
}

const (
	metricsServerNamespace  = "kube-system"
	metricsServerName       = "metrics-server"
	metricsServerUser       = "system:nodekit-e2e:metrics-server"
	metricsAPIServiceName   = "v1beta1.metrics.k8s.io"
	metricsServerRBACPrefix = "nodekit-e2e:metrics-server"
)

// StartMetricsServer runs metrics-server on 127.0.0.1 as it runs in a
// cluster, with its own identity and RBAC (nodes/metrics, nodes and pods;
// delegated authentication and authorization), verifying the kubelets'
// serving certificates against the cluster CA (no --kubelet-insecure-tls),
// and registers it through the aggregation layer: an ExternalName Service
// kube-system/metrics-server for localhost (the API server runs on this
// host, and no kube-proxy routes a ClusterIP) and the APIService
// v1beta1.metrics.k8s.io with the cluster CA as its caBundle. It returns
// once the APIService is Available; the caller must Stop it.
func (c *ControlPlane) StartMetricsServer(ctx context.Context, opts MetricsServerOptions) (_ *MetricsServer, err error) {
	if opts.Binary == "" {
		return nil, errors.New("start metrics-server: Binary is required")
	}
	if opts.Resolution == 0 {
		opts.Resolution = 15 * time.Second
	}
	if opts.Timeout == 0 {
		opts.Timeout = 3 * time.Minute
	}
	fail := func(err error) (*MetricsServer, error) { return nil, fmt.Errorf("start metrics-server: %w", err) }
	dir := filepath.Join(c.Dir, "metrics-server")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	creds, err := c.PKI.ClientCert("metrics-server-client", metricsServerUser)
	if err != nil {
		return fail(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := c.PKI.WriteKubeconfig(kubeconfig, c.Server, creds); err != nil {
		return fail(err)
	}
	port, err := freePort(loopback)
	if err != nil {
		return fail(err)
	}
	serving, err := c.PKI.ServingCert("metrics-server-serving", metricsServerName,
		[]net.IP{net.ParseIP(loopback)}, []string{metricsServerName + "." + metricsServerNamespace + ".svc", "localhost"})
	if err != nil {
		return fail(err)
	}
	ms := &MetricsServer{cp: c, LogPath: filepath.Join(c.Dir, "logs", "metrics-server.log")}
	defer func() {
		if err != nil {
			ms.Stop()
		}
	}()
	if err := c.metricsServerRBAC(ctx); err != nil {
		return fail(err)
	}
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=" + loopback,
		fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file=" + serving.Cert,
		"--tls-private-key-file=" + serving.Key,
		"--client-ca-file=" + c.PKI.CA.Cert,
		"--requestheader-client-ca-file=" + c.PKI.FrontProxyCA.Cert,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--kubelet-certificate-authority=" + c.PKI.CA.Cert,
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-use-node-status-port",
		"--metric-resolution=" + opts.Resolution.String(),
		"--v=2",
	}
	if opts.NodeSelector != "" {
		args = append(args, "--node-selector="+opts.NodeSelector)
	}
	if ms.proc, err = startProcess("metrics-server", ms.LogPath, opts.Binary, args, nil); err != nil {
		return fail(err)
	}
	if err := c.registerMetricsAPI(ctx, int32(port)); err != nil {
		return fail(err)
	}
	if err := c.waitMetricsAPIAvailable(ctx, ms, opts.Timeout); err != nil {
		return fail(err)
	}
	fmt.Fprintf(c.log, "metrics-server available on %s (pid %d, log %s)\n", hostPort(loopback, port), ms.proc.pid(), ms.LogPath)
	return ms, nil
}

// PID returns metrics-server's process id; 0 when it is not running.
func (m *MetricsServer) PID() int {
	if m.proc == nil || m.proc.exited() {
		return 0
	}
	return m.proc.pid()
}

// Stop unregisters the APIService, removes the Service and RBAC objects
// and stops the process. It may be called more than once.
func (m *MetricsServer) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	ignoreNotFound := func(err error) {
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	client := m.cp.client
	ignoreNotFound(client.CoreV1().RESTClient().Delete().AbsPath("/apis/apiregistration.k8s.io/v1/apiservices", metricsAPIServiceName).Do(ctx).Error())
	ignoreNotFound(client.CoreV1().Services(metricsServerNamespace).Delete(ctx, metricsServerName, metav1.DeleteOptions{}))
	rbac := client.RbacV1()
	for _, name := range []string{metricsServerRBACPrefix, metricsServerRBACPrefix + ":auth-delegator"} {
		ignoreNotFound(rbac.ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{}))
	}
	ignoreNotFound(rbac.ClusterRoles().Delete(ctx, metricsServerRBACPrefix, metav1.DeleteOptions{}))
	ignoreNotFound(rbac.RoleBindings(metricsServerNamespace).Delete(ctx, metricsServerRBACPrefix+":auth-reader", metav1.DeleteOptions{}))
	if m.proc != nil {
		if err := m.proc.stop(15 * time.Second); err != nil && errors.Is(err, errTimeout) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// metricsServerRBAC grants metrics-server's user what its upstream
// manifests grant its service account.
func (c *ControlPlane) metricsServerRBAC(ctx context.Context) error {
	rbac := c.client.RbacV1()
	user := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: metricsServerUser}}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: metricsServerRBACPrefix},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes/metrics"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"get", "list", "watch"}},
		},
	}
	if _, err := rbac.ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for name, roleName := range map[string]string{
		metricsServerRBACPrefix:                     metricsServerRBACPrefix,
		metricsServerRBACPrefix + ":auth-delegator": "system:auth-delegator",
	} {
		b := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roleName},
			Subjects:   user,
		}
		if _, err := rbac.ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: metricsServerRBACPrefix + ":auth-reader", Namespace: metricsServerNamespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "extension-apiserver-authentication-reader"},
		Subjects:   user,
	}
	if _, err := rbac.RoleBindings(metricsServerNamespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// registerMetricsAPI creates the Service and the APIService.
func (c *ControlPlane) registerMetricsAPI(ctx context.Context, port int32) error {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: metricsServerName, Namespace: metricsServerNamespace},
		Spec:       v1.ServiceSpec{Type: v1.ServiceTypeExternalName, ExternalName: "localhost"},
	}
	if _, err := c.client.CoreV1().Services(metricsServerNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service %s/%s: %w", metricsServerNamespace, metricsServerName, err)
	}
	apiService := fmt.Sprintf(`{
  "apiVersion": "apiregistration.k8s.io/v1",
  "kind": "APIService",
  "metadata": {"name": %q},
  "spec": {
    "group": "metrics.k8s.io",
    "version": "v1beta1",
    "service": {"namespace": %q, "name": %q, "port": %d},
    "caBundle": %q,
    "groupPriorityMinimum": 100,
    "versionPriority": 100
  }
}`, metricsAPIServiceName, metricsServerNamespace, metricsServerName, port, base64.StdEncoding.EncodeToString(c.PKI.CAData()))
	err := c.client.CoreV1().RESTClient().Post().AbsPath("/apis/apiregistration.k8s.io/v1/apiservices").
		SetHeader("Content-Type", "application/json").Body([]byte(apiService)).Do(ctx).Error()
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create APIService %s: %w", metricsAPIServiceName, err)
	}
	return nil
}

// waitMetricsAPIAvailable waits for the APIService's Available condition,
// failing early if metrics-server exits.
func (c *ControlPlane) waitMetricsAPIAvailable(ctx context.Context, ms *MetricsServer, timeout time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		if ms.proc.exited() {
			return false, ms.proc.exitErr()
		}
		var got struct {
			Status struct {
				Conditions []struct {
					Type, Status, Reason, Message string
				} `json:"conditions"`
			} `json:"status"`
		}
		data, err := c.client.CoreV1().RESTClient().Get().AbsPath("/apis/apiregistration.k8s.io/v1/apiservices", metricsAPIServiceName).DoRaw(ctx)
		if err == nil {
			err = json.Unmarshal(data, &got)
		}
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == "Available" {
				last = cond.Status + " " + cond.Reason + ": " + cond.Message
				return cond.Status == "True", nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("APIService %s not Available (last: %s): %w\n--- last lines of %s:\n%s", metricsAPIServiceName, last, err, ms.LogPath, LogTail(ms.LogPath, 30))
	}
	return nil
}
