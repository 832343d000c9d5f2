package runtime

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// maxHookResponseBytes is how much of an httpGet hook's response is read.
const maxHookResponseBytes = 10 << 10

// defaultHookClient is the kubelet's lifecycle hook HTTP client: no TLS
// verification, no connection reuse.
func defaultHookClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // as the kubelet's hooks
		DisableKeepAlives: true,
		Proxy:             http.ProxyURL(nil),
	}}
}

// runHook runs a lifecycle handler for container c (runtime ID id): exec in
// the container, an HTTP GET (status codes are not checked, as with the
// kubelet; only failing to get a response fails the hook), or a sleep on the
// PodManager's clock. podIP gives the host of an httpGet without one. It
// returns the kubelet's message for a failure.
func (m *PodManager) runHook(ctx context.Context, pod *v1.Pod, c *v1.Container, id string, h *v1.LifecycleHandler, podIP func(context.Context) (string, error)) (string, error) {
	switch {
	case h.Exec != nil:
		stdout, stderr, err := m.rs.ExecSync(ctx, id, h.Exec.Command, 0)
		if err != nil {
			output := string(stdout) + string(stderr)
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v, message: %q", h.Exec.Command, c.Name, podDesc(pod), err, output), err
		}
		return "", nil
	case h.HTTPGet != nil:
		if err := m.runHTTPHook(ctx, c, h.HTTPGet, podIP); err != nil {
			return fmt.Sprintf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: %v", h.HTTPGet.Path, c.Name, podDesc(pod), err), err
		}
		return "", nil
	case h.Sleep != nil:
		t := m.clock.NewTimer(time.Duration(h.Sleep.Seconds) * time.Second)
		defer t.Stop()
		select {
		case <-t.C():
			return "", nil
		case <-ctx.Done():
			err := errors.New("container terminated before sleep hook finished")
			return fmt.Sprintf("Sleep lifecycle hook (%d) for Container %q in Pod %q failed - error: %v", h.Sleep.Seconds, c.Name, podDesc(pod), err), err
		}
	}
	err := fmt.Errorf("invalid handler: %v", h)
	return fmt.Sprintf("Cannot run handler: %v", err), err
}

func (m *PodManager) runHTTPHook(ctx context.Context, c *v1.Container, g *v1.HTTPGetAction, podIP func(context.Context) (string, error)) error {
	host := g.Host
	if host == "" {
		ip, err := podIP(ctx)
		if err != nil {
			return fmt.Errorf("find the pod's IP: %w", err)
		}
		host = ip
	}
	port, err := resolvePort(g.Port, c)
	if err != nil {
		return err
	}
	scheme := strings.ToLower(string(g.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	path := g.Path
	if path != "" && !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	u, err := url.Parse(scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port)) + path)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "kube-lifecycle/nodekit")
	req.Header.Set("Accept", "*/*")
	for _, h := range g.HTTPHeaders {
		if strings.EqualFold(h.Name, "Host") {
			req.Host = h.Value
			continue
		}
		req.Header.Add(h.Name, h.Value)
	}
	resp, err := m.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, maxHookResponseBytes))
	return err
}

// resolvePort returns a numeric port, looking a named one up in c's ports.
func resolvePort(p intstr.IntOrString, c *v1.Container) (int, error) {
	if p.Type == intstr.Int {
		if p.IntVal <= 0 || p.IntVal > 65535 {
			return 0, fmt.Errorf("invalid port number %d", p.IntVal)
		}
		return int(p.IntVal), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil && n > 0 && n <= 65535 {
		return n, nil
	}
	return 0, fmt.Errorf("couldn't find port %q in container %s", p.StrVal, c.Name)
}
