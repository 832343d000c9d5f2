package prober

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	utilio "k8s.io/utils/io"

	"github.com/nodekit/nodekit"
)

// maxRedirects is how many redirects an HTTP probe follows.
const maxRedirects = 10

// userAgent is the User-Agent of HTTP and gRPC probes, the kubelet's:
// "kube-probe/<major>.<minor>" of the Kubernetes release nodekit matches
// (kube-probe/1.37).
var userAgent = "kube-probe/" + majorMinor(nodekit.KubernetesVersion)

// majorMinor returns "1.37" of "v1.37.2".
func majorMinor(version string) string {
	v := strings.TrimPrefix(version, "v")
	if i := strings.IndexByte(v, '.'); i >= 0 {
		if j := strings.IndexByte(v[i+1:], '.'); j >= 0 {
			return v[:i+1+j]
		}
	}
	return v
}

type httpHandler struct {
	transport *http.Transport
}

// NewHTTPHandler returns the default httpGet handler, the kubelet's: a GET
// to scheme://host:port/path (scheme http unless set, host the pod IP
// unless set, port by number or by the name of one of the container's
// ports) with the probe's headers, a Host header setting the request's
// host, User-Agent "kube-probe/1.37" and Accept "*/*" unless the probe sets
// them (an empty Accept removes it). A response 200–399 is Success; 300–399 after
// the redirects stopped (at one to another host) is Warning; others are
// Failure, with a message that leaves out the body. Redirects are followed
// only to the same host and at most 10 times (more is a Failure). At most
// 10 KiB of the body is read. TLS certificates are not verified; no proxy,
// no keep-alives, no compression. The whole exchange, redirects included,
// must finish within the probe's timeout.
func NewHTTPHandler() Handler {
	return httpHandler{transport: utilnet.SetTransportDefaults(&http.Transport{
		TLSClientConfig:    &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // probes do not verify, as the kubelet's.
		DisableKeepAlives:  true,
		Proxy:              http.ProxyURL(nil),
		DisableCompression: true,
		DialContext:        probeDialer().DialContext,
	})}
}

// Kind returns KindHTTPGet.
func (httpHandler) Kind() Kind { return KindHTTPGet }

// Probe runs t's httpGet probe.
func (h httpHandler) Probe(ctx context.Context, t *Target) (Result, string, error) {
	req, err := newHTTPRequest(ctx, t.Probe.HTTPGet, t.Container, t.PodIP)
	if err != nil {
		return Unknown, "", err
	}
	client := http.Client{Timeout: t.Timeout, Transport: h.transport, CheckRedirect: checkRedirect}
	res, err := client.Do(req)
	if err != nil {
		// Errors, timeouts included, are failures.
		return Failure, err.Error(), nil
	}
	defer res.Body.Close()
	b, err := utilio.ReadAtMost(res.Body, maxOutputLength)
	if err != nil && !errors.Is(err, utilio.ErrLimitReached) {
		return Failure, "", err
	}
	if res.StatusCode >= http.StatusOK && res.StatusCode < http.StatusBadRequest {
		if res.StatusCode >= http.StatusMultipleChoices {
			return Warning, "Probe terminated redirects, Response body: " + string(b), nil
		}
		return Success, string(b), nil
	}
	// The message must not contain the body (kubernetes issue 99425).
	return Failure, fmt.Sprintf("HTTP probe failed with statuscode: %d", res.StatusCode), nil
}

// checkRedirect follows redirects to the same host, at most maxRedirects
// times; at a redirect to another host it stops and returns that response.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if req.URL.Hostname() != via[0].URL.Hostname() {
		return http.ErrUseLastResponse
	}
	if len(via) >= maxRedirects {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

// newHTTPRequest builds the request of an httpGet probe, as the kubelet's
// NewRequestForHTTPGetAction.
func newHTTPRequest(ctx context.Context, get *v1.HTTPGetAction, c *v1.Container, podIP string) (*http.Request, error) {
	scheme := strings.ToLower(string(get.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	host := get.Host
	if host == "" {
		host = podIP
	}
	port, err := resolvePort(get.Port, c)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(get.Path)
	if err != nil {
		// A path that does not parse is passed along as it is.
		u = &url.URL{Path: get.Path}
	}
	u.Scheme = scheme
	u.Host = net.JoinHostPort(host, strconv.Itoa(port))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	headers := make(http.Header, len(get.HTTPHeaders)+2)
	for _, h := range get.HTTPHeaders {
		headers.Add(h.Name, h.Value)
	}
	if _, ok := headers["User-Agent"]; !ok {
		headers.Set("User-Agent", userAgent)
	}
	if _, ok := headers["Accept"]; !ok {
		headers.Set("Accept", "*/*")
	} else if headers.Get("Accept") == "" {
		headers.Del("Accept")
	}
	req.Header = headers
	req.Host = headers.Get("Host")
	return req, nil
}

// resolvePort returns the port number param names: a number, or the name
// of one of c's ports.
func resolvePort(param intstr.IntOrString, c *v1.Container) (int, error) {
	port := -1
	switch param.Type {
	case intstr.Int:
		port = param.IntValue()
	case intstr.String:
		found := false
		for _, p := range c.Ports {
			if p.Name == param.StrVal {
				port, found = int(p.ContainerPort), true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("port %q not found", param.StrVal)
		}
	default:
		return port, fmt.Errorf("intOrString had no kind: %+v", param)
	}
	if port > 0 && port < 65536 {
		return port, nil
	}
	return port, fmt.Errorf("invalid port number: %v", port)
}
