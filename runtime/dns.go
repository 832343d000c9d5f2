package runtime

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
)

// Limits of a pod's resolv.conf, as the API server validates them.
const (
	maxDNSNameservers     = 3
	maxDNSSearchPaths     = 32
	maxDNSSearchListChars = 2048
	maxResolvConfBytes    = 10 << 20
)

// podDNS returns the sandbox DNS config for pod, with the kubelet's
// semantics: ClusterFirst uses the cluster DNS servers and the
// <ns>.svc.<domain>, svc.<domain>, <domain> search paths before the host's
// (and falls back to Default, with a MissingClusterDNS event, when no
// cluster DNS is configured); ClusterFirst for a hostNetwork pod and
// Default use the host's resolver config; ClusterFirstWithHostNet is
// ClusterFirst; None starts empty. The pod's dnsConfig is merged last, and
// the result is trimmed to the resolver's limits with a DNSConfigForming
// event.
func (m *PodManager) podDNS(ctx context.Context, pod *v1.Pod) (*runtimeapi.DNSConfig, error) {
	host, err := m.hostDNS()
	if err != nil {
		return nil, err
	}
	cfg := host
	const (
		dnsCluster = iota
		dnsHost
		dnsNone
	)
	typ := dnsCluster
	switch pod.Spec.DNSPolicy {
	case v1.DNSNone:
		typ = dnsNone
	case v1.DNSClusterFirstWithHostNet:
	case v1.DNSClusterFirst:
		if pod.Spec.HostNetwork {
			typ = dnsHost
		}
	case v1.DNSDefault:
		typ = dnsHost
	default:
		klog.FromContext(ctx).Error(nil, "Invalid DNS policy, falling back to ClusterFirst", "pod", klog.KObj(pod), "dnsPolicy", pod.Spec.DNSPolicy)
	}
	switch typ {
	case dnsNone:
		cfg = &runtimeapi.DNSConfig{}
	case dnsCluster:
		if len(m.opts.ClusterDNS) > 0 {
			servers := make([]string, len(m.opts.ClusterDNS))
			for i, ip := range m.opts.ClusterDNS {
				servers[i] = ip.String()
			}
			cfg = &runtimeapi.DNSConfig{Servers: servers, Searches: m.clusterSearches(pod, host.Searches), Options: []string{"ndots:5"}}
			break
		}
		msg := fmt.Sprintf("kubelet does not have ClusterDNS IP configured and cannot create Pod using %q policy. Falling back to %q policy.", v1.DNSClusterFirst, v1.DNSDefault)
		m.recorder.Eventf(pod, v1.EventTypeWarning, "MissingClusterDNS", "pod: %q. %s", podDesc(pod), msg)
		typ = dnsHost
	}
	if typ == dnsHost && m.opts.ResolverConfig == "" {
		// Without a host resolver file the node resolves itself.
		cfg.Servers = append(cfg.Servers, m.loopbackServers()...)
		cfg.Searches = []string{"."}
	}
	if pod.Spec.DNSConfig != nil {
		cfg.Servers = dedup(append(cfg.Servers, pod.Spec.DNSConfig.Nameservers...))
		cfg.Searches = dedup(append(cfg.Searches, pod.Spec.DNSConfig.Searches...))
		cfg.Options = mergeDNSOptions(cfg.Options, pod.Spec.DNSConfig.Options)
	}
	m.fitDNSLimits(pod, cfg)
	return cfg, nil
}

func (m *PodManager) clusterSearches(pod *v1.Pod, host []string) []string {
	d := m.opts.ClusterDomain
	if d == "" {
		return host
	}
	return dedup(append([]string{pod.Namespace + ".svc." + d, "svc." + d, d}, host...))
}

func (m *PodManager) loopbackServers() []string {
	var out []string
	for _, ip := range m.opts.NodeIPs {
		if ip.To4() == nil {
			out = append(out, "::1")
		} else {
			out = append(out, "127.0.0.1")
		}
	}
	if len(out) == 0 {
		out = []string{"127.0.0.1"}
	}
	return dedup(out)
}

// hostDNS reads the node's resolver config file (a fresh copy each call).
func (m *PodManager) hostDNS() (*runtimeapi.DNSConfig, error) {
	if m.opts.ResolverConfig == "" {
		return &runtimeapi.DNSConfig{}, nil
	}
	f, err := os.Open(m.opts.ResolverConfig)
	if err != nil {
		return nil, fmt.Errorf("read resolver config: %w", err)
	}
	defer f.Close()
	return parseResolvConf(io.LimitReader(f, maxResolvConfBytes))
}

// parseResolvConf reads nameserver, search and options lines; the last
// search line wins, options accumulate by name.
func parseResolvConf(r io.Reader) (*runtimeapi.DNSConfig, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read resolver config: %w", err)
	}
	cfg := &runtimeapi.DNSConfig{}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		switch fields[0] {
		case "nameserver":
			if len(fields) < 2 {
				return nil, fmt.Errorf("resolver config: nameserver line without an address")
			}
			cfg.Servers = append(cfg.Servers, fields[1])
		case "search":
			cfg.Searches = nil
			for _, s := range fields[1:] {
				if s != "." {
					cfg.Searches = append(cfg.Searches, strings.TrimSuffix(s, "."))
				}
			}
		case "options":
			cfg.Options = mergeOptionStrings(cfg.Options, fields[1:])
		}
	}
	return cfg, nil
}

// mergeOptionStrings merges "name[:value]" options, later ones replacing
// earlier ones of the same name, keeping first-seen order.
func mergeOptionStrings(opts, more []string) []string {
	out := slices.Clone(opts)
	for _, o := range more {
		name, _, _ := strings.Cut(o, ":")
		if i := slices.IndexFunc(out, func(e string) bool { n, _, _ := strings.Cut(e, ":"); return n == name }); i >= 0 {
			out[i] = o
		} else {
			out = append(out, o)
		}
	}
	return out
}

func mergeDNSOptions(opts []string, pod []v1.PodDNSConfigOption) []string {
	more := make([]string, len(pod))
	for i, o := range pod {
		more[i] = o.Name
		if o.Value != nil && *o.Value != "" {
			more[i] += ":" + *o.Value
		}
	}
	return mergeOptionStrings(opts, more)
}

func dedup(s []string) []string {
	var out []string
	for _, v := range s {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// fitDNSLimits trims nameservers and search paths to the resolver's limits,
// recording a DNSConfigForming warning when it drops anything.
func (m *PodManager) fitDNSLimits(pod *v1.Pod, cfg *runtimeapi.DNSConfig) {
	if len(cfg.Servers) > maxDNSNameservers {
		cfg.Servers = cfg.Servers[:maxDNSNameservers]
		m.recorder.Eventf(pod, v1.EventTypeWarning, "DNSConfigForming",
			"Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: %s", strings.Join(cfg.Servers, " "))
	}
	exceeded := false
	if len(cfg.Searches) > maxDNSSearchPaths {
		cfg.Searches, exceeded = cfg.Searches[:maxDNSSearchPaths], true
	}
	kept := cfg.Searches[:0]
	for _, s := range cfg.Searches {
		if len(s) > validation.DNS1123SubdomainMaxLength {
			exceeded = true
			continue
		}
		kept = append(kept, s)
	}
	cfg.Searches = kept
	for len(strings.Join(cfg.Searches, " ")) > maxDNSSearchListChars {
		cfg.Searches, exceeded = cfg.Searches[:len(cfg.Searches)-1], true
	}
	if exceeded {
		m.recorder.Eventf(pod, v1.EventTypeWarning, "DNSConfigForming",
			"Search Line limits were exceeded, some search paths have been omitted, the applied search line is: %s", strings.Join(cfg.Searches, " "))
	}
}

// podHostname returns the sandbox hostname of a pod not in the host
// network: spec.hostnameOverride when set, else spec.hostname or the pod
// name, cut to 63 characters, as the FQDN
// <hostname>.<subdomain>.<ns>.svc.<domain> when setHostnameAsFQDN is true
// and the pod has a subdomain.
func (m *PodManager) podHostname(pod *v1.Pod) (string, error) {
	if o := pod.Spec.HostnameOverride; o != nil {
		// hostnameOverride (GA in 1.37) replaces hostname, subdomain and
		// setHostnameAsFQDN.
		if msgs := validation.IsDNS1123Subdomain(*o); len(msgs) != 0 {
			return "", fmt.Errorf("pod HostnameOverride %q is not a valid DNS subdomain: %s", *o, strings.Join(msgs, ";"))
		}
		return truncateHostname(pod, *o)
	}
	hostname := pod.Name
	if pod.Spec.Hostname != "" {
		if msgs := validation.IsDNS1123Label(pod.Spec.Hostname); len(msgs) != 0 {
			return "", fmt.Errorf("pod Hostname %q is not a valid DNS label: %s", pod.Spec.Hostname, strings.Join(msgs, ";"))
		}
		hostname = pod.Spec.Hostname
	}
	hostname, err := truncateHostname(pod, hostname)
	if err != nil {
		return "", err
	}
	if pod.Spec.Subdomain == "" || pod.Spec.SetHostnameAsFQDN == nil || !*pod.Spec.SetHostnameAsFQDN {
		return hostname, nil
	}
	if msgs := validation.IsDNS1123Label(pod.Spec.Subdomain); len(msgs) != 0 {
		return "", fmt.Errorf("pod Subdomain %q is not a valid DNS label: %s", pod.Spec.Subdomain, strings.Join(msgs, ";"))
	}
	fqdn := fmt.Sprintf("%s.%s.%s.svc.%s", hostname, pod.Spec.Subdomain, pod.Namespace, m.opts.ClusterDomain)
	if len(fqdn) > 64 {
		return "", fmt.Errorf("failed to construct FQDN from pod hostname and cluster domain, FQDN %s is too long (64 characters is the max, %d characters requested)", fqdn, len(fqdn))
	}
	return fqdn, nil
}

// truncateHostname caps hostname at 63 characters, without a trailing
// '-' or '.', as the kubelet's truncatePodHostnameIfNeeded.
func truncateHostname(pod *v1.Pod, hostname string) (string, error) {
	if len(hostname) <= 63 {
		return hostname, nil
	}
	hostname = strings.TrimRight(hostname[:63], "-.")
	if hostname == "" {
		return "", fmt.Errorf("hostname for pod %q was invalid", pod.Name)
	}
	return hostname, nil
}
