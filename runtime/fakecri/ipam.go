package fakecri

import (
	"fmt"
	"math/big"
	"net/netip"
)

// ipam hands out pod IPs from one range per IP family. Each range keeps a
// cursor and the set of addresses in use, so allocation is O(1) amortized
// and memory grows only with the sandboxes that hold an IP. The Server's
// mutex guards it.
type ipam struct {
	ranges []*ipRange
}

type ipRange struct {
	prefix netip.Prefix
	size   *big.Int // number of usable host addresses
	next   netip.Addr
	inUse  map[netip.Addr]struct{}
}

// newIPAM parses cidrs. Network, gateway (the first host address, like a
// CNI bridge) and, for IPv4, broadcast addresses are never handed out.
func newIPAM(cidrs []string) (*ipam, error) {
	p := &ipam{}
	for _, c := range cidrs {
		prefix, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("pod CIDR %q: %w", c, err)
		}
		prefix = prefix.Masked()
		hostBits := prefix.Addr().BitLen() - prefix.Bits()
		size := new(big.Int).Lsh(big.NewInt(1), uint(hostBits))
		size.Sub(size, big.NewInt(2)) // network address and gateway
		if prefix.Addr().Is4() {
			size.Sub(size, big.NewInt(1)) // broadcast
		}
		if size.Sign() <= 0 {
			return nil, fmt.Errorf("pod CIDR %q has no room for pod IPs", c)
		}
		first := prefix.Addr().Next().Next()
		p.ranges = append(p.ranges, &ipRange{prefix: prefix, size: size, next: first, inUse: map[netip.Addr]struct{}{}})
	}
	return p, nil
}

// allocate returns one free IP from every range, primary first. It fails
// when a range is exhausted, leaving nothing allocated.
func (p *ipam) allocate() ([]string, error) {
	var got []netip.Addr
	for _, r := range p.ranges {
		ip, err := r.allocate()
		if err != nil {
			for i, prev := range got {
				delete(p.ranges[i].inUse, prev)
			}
			return nil, err
		}
		got = append(got, ip)
	}
	out := make([]string, len(got))
	for i, ip := range got {
		out[i] = ip.String()
	}
	return out, nil
}

func (r *ipRange) allocate() (netip.Addr, error) {
	if big.NewInt(int64(len(r.inUse))).Cmp(r.size) >= 0 {
		return netip.Addr{}, fmt.Errorf("pod CIDR %s is exhausted", r.prefix)
	}
	for {
		ip := r.next
		r.advance()
		if _, used := r.inUse[ip]; !used {
			r.inUse[ip] = struct{}{}
			return ip, nil
		}
	}
}

// advance moves the cursor to the next usable address, wrapping around.
func (r *ipRange) advance() {
	next := r.next.Next()
	last := !next.IsValid() || !r.prefix.Contains(next)
	if !last && r.prefix.Addr().Is4() && !r.prefix.Contains(next.Next()) {
		last = true // next is the broadcast address
	}
	if last {
		next = r.prefix.Addr().Next().Next()
	}
	r.next = next
}

// release returns ips to their ranges; unknown addresses are ignored.
func (p *ipam) release(ips []string) {
	for _, s := range ips {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		for _, r := range p.ranges {
			if r.prefix.Contains(ip) {
				delete(r.inUse, ip)
			}
		}
	}
}
