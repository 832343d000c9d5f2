package status

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	v1 "k8s.io/api/core/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"
)

// nodeAddressOptions configures nodeAddress.
type nodeAddressOptions struct {
	// NodeIPs is --node-ip: empty to detect, one address, or two of
	// different families (dual-stack). An unspecified address (0.0.0.0 or
	// ::) means detect, preferring that family. Loopback addresses are
	// accepted with a warning logged once (the kubelet refuses them), so that
	// several test nodes can share one machine on 127.0.0.N.
	NodeIPs []net.IP
	// Hostname is reported as the Hostname address. Required.
	Hostname string

	// InterfaceAddrs lists the host's addresses to validate a node IP;
	// default net.InterfaceAddrs.
	InterfaceAddrs func() ([]net.Addr, error)
	// LookupIP resolves the node name; default net.LookupIP.
	LookupIP func(host string) ([]net.IP, error)
	// DefaultRouteIP returns the address of the interface with the default
	// route, preferring the family of its argument (nil: IPv4); default
	// k8s.io/apimachinery/pkg/util/net.ResolveBindAddress.
	DefaultRouteIP func(net.IP) (net.IP, error)
}

// nodeAddress returns a Setter for status.addresses, without a cloud provider,
// in the kubelet's order: InternalIP from (1) NodeIPs, (2) Hostname if it is
// an IP, (3) a DNS lookup of the node name (preferred family first, loopback
// and other unusable addresses skipped), (4) the default-route interface;
// then the Hostname address. With two NodeIPs both are InternalIPs. A node IP
// that is not on any interface of this host is an error (the addresses are
// left as they were).
func nodeAddress(opts nodeAddressOptions) (Setter, error) {
	if opts.Hostname == "" {
		return nil, errors.New("node address: Hostname is required")
	}
	if len(opts.NodeIPs) > 2 {
		return nil, fmt.Errorf("node address: at most two node IPs, got %d", len(opts.NodeIPs))
	}
	for _, ip := range opts.NodeIPs {
		if ip == nil {
			return nil, errors.New("node address: a node IP is nil")
		}
	}
	if len(opts.NodeIPs) == 2 && (opts.NodeIPs[0].To4() != nil) == (opts.NodeIPs[1].To4() != nil) {
		return nil, fmt.Errorf("node address: dual-stack node IPs %s and %s must be of different families", opts.NodeIPs[0], opts.NodeIPs[1])
	}
	if opts.InterfaceAddrs == nil {
		opts.InterfaceAddrs = net.InterfaceAddrs
	}
	if opts.LookupIP == nil {
		opts.LookupIP = net.LookupIP
	}
	if opts.DefaultRouteIP == nil {
		opts.DefaultRouteIP = utilnet.ResolveBindAddress
	}

	var primary, secondary net.IP
	if len(opts.NodeIPs) > 0 {
		primary = opts.NodeIPs[0]
	}
	if len(opts.NodeIPs) > 1 {
		secondary = opts.NodeIPs[1]
	}
	specified := func(ip net.IP) bool { return ip != nil && !ip.IsUnspecified() }
	preferIPv4 := primary == nil || primary.To4() != nil
	hostnameIP := netutils.ParseIPSloppy(opts.Hostname)
	var loopbackWarning sync.Once

	// validate checks a node IP given by the user: loopback is allowed.
	validate := func(ctx context.Context, ip net.IP) error {
		if ip.IsLoopback() {
			loopbackWarning.Do(func() {
				klog.FromContext(ctx).Info("Warning: using a loopback node IP; only components on this machine can reach the node", "nodeIP", ip.String())
			})
			return nil
		}
		return validateHostIP(ip, opts.InterfaceAddrs)
	}

	return func(ctx context.Context, node *v1.Node) error {
		if specified(primary) && specified(secondary) {
			for _, ip := range []net.IP{primary, secondary} {
				if err := validate(ctx, ip); err != nil {
					return fmt.Errorf("validate node IP %s of node %s: %w", ip, node.Name, err)
				}
			}
			node.Status.Addresses = []v1.NodeAddress{
				{Type: v1.NodeInternalIP, Address: primary.String()},
				{Type: v1.NodeInternalIP, Address: secondary.String()},
				{Type: v1.NodeHostName, Address: opts.Hostname},
			}
			return nil
		}
		var ip net.IP
		switch {
		case specified(primary):
			if err := validate(ctx, primary); err != nil {
				return fmt.Errorf("validate node IP %s of node %s: %w", primary, node.Name, err)
			}
			ip = primary
		case hostnameIP != nil:
			ip = hostnameIP
		default:
			addrs, _ := opts.LookupIP(node.Name)
			for _, a := range addrs {
				if a.IsLoopback() || validateHostIP(a, opts.InterfaceAddrs) != nil {
					continue
				}
				if (a.To4() != nil) == preferIPv4 {
					ip = a
					break
				}
				if ip == nil {
					ip = a
				}
			}
			if ip == nil {
				var err error
				if ip, err = opts.DefaultRouteIP(primary); err != nil || ip == nil {
					return fmt.Errorf("find an IP address for node %s (no node IP given, node name does not resolve to a usable address, no default route): %v", node.Name, err)
				}
			}
		}
		node.Status.Addresses = []v1.NodeAddress{
			{Type: v1.NodeInternalIP, Address: ip.String()},
			{Type: v1.NodeHostName, Address: opts.Hostname},
		}
		return nil
	}, nil
}

// validateHostIP applies the kubelet's node IP rules: a usable unicast
// address that one of the host's interfaces carries.
func validateHostIP(ip net.IP, interfaceAddrs func() ([]net.Addr, error)) error {
	switch {
	case ip.To4() == nil && ip.To16() == nil:
		return errors.New("not a valid IP address")
	case ip.IsLoopback():
		return errors.New("a loopback address")
	case ip.IsMulticast():
		return errors.New("a multicast address")
	case ip.IsLinkLocalUnicast():
		return errors.New("a link-local unicast address")
	case ip.IsUnspecified():
		return errors.New("the unspecified address")
	}
	addrs, err := interfaceAddrs()
	if err != nil {
		return fmt.Errorf("list the host's addresses: %w", err)
	}
	for _, a := range addrs {
		var hostIP net.IP
		switch v := a.(type) {
		case *net.IPNet:
			hostIP = v.IP
		case *net.IPAddr:
			hostIP = v.IP
		}
		if hostIP.Equal(ip) {
			return nil
		}
	}
	return errors.New("not found on the host's network interfaces")
}
