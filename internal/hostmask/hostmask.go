// Package hostmask parses and matches XLA-style host masks: an exact host
// name, "*.domain" (the domain itself and everything below it), "*" (every
// host), or an IPv4/IPv6 address or CIDR network.
package hostmask

import (
	"fmt"
	"net/netip"
	"strings"
)

// Kind says what a Mask matches on.
type Kind uint8

// The kinds of masks.
const (
	Any     Kind = iota + 1 // "*": every peer
	Exact                   // one host name
	Domain                  // "*.example.org": the domain and all names below it
	Network                 // an address or CIDR network
)

// MaxLen is the longest mask accepted (a DNS name is at most 253 bytes).
const MaxLen = 255

// Mask is one parsed host mask. The zero Mask matches nothing.
type Mask struct {
	kind   Kind
	name   string       // Exact, Domain: lower case, no trailing dot
	prefix netip.Prefix // Network: masked
}

// Parse parses a mask. It accepts "*", "*.domain", a host name, an IP
// address (a /32 or /128 network) or a CIDR network such as 192.0.2.0/24 or
// 2001:db8::/32. Host bits set in a CIDR network are an error, because they
// usually mean a typo.
func Parse(s string) (Mask, error) {
	if s == "" {
		return Mask{}, fmt.Errorf("empty host mask")
	}
	if len(s) > MaxLen {
		return Mask{}, fmt.Errorf("host mask longer than %d bytes", MaxLen)
	}
	if s == "*" {
		return Mask{kind: Any}, nil
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			_, why, _ := strings.Cut(err.Error(), "): ")
			return Mask{}, fmt.Errorf("invalid network %q: %s", s, why)
		}
		if p.Masked() != p {
			return Mask{}, fmt.Errorf("network %q has host bits set (did you mean %s?)", s, p.Masked())
		}
		return Mask{kind: Network, prefix: unmapPrefix(p)}, nil
	}
	a, err := netip.ParseAddr(s)
	if err == nil {
		if a.Zone() != "" {
			return Mask{}, fmt.Errorf("address %q: zones are not allowed", s)
		}
		a = a.Unmap()
		return Mask{kind: Network, prefix: netip.PrefixFrom(a, a.BitLen())}, nil
	}
	if looksLikeAddr(s) {
		// "300.1.2.3" is a valid DNS name only in form: no top-level
		// domain is numeric, so it is an address typo, and a class made
		// of it would never match.
		if t := strings.TrimSuffix(s, "."); t != s {
			if _, err := netip.ParseAddr(t); err == nil {
				return Mask{}, fmt.Errorf("invalid host name %q: an address with a trailing dot; write %s", s, t)
			}
		}
		if strings.Trim(s, "0123456789.") != "" && !strings.Contains(s, ":") {
			return Mask{}, fmt.Errorf("invalid host name %q: its last label is a number, which no top-level domain is", s)
		}
		_, why, _ := strings.Cut(err.Error(), "): ")
		return Mask{}, fmt.Errorf("invalid address %q: %s", s, why)
	}
	if rest, ok := strings.CutPrefix(s, "*."); ok {
		name, err := hostName(rest)
		if err != nil {
			return Mask{}, fmt.Errorf("invalid domain mask %q: %w", s, err)
		}
		return Mask{kind: Domain, name: name}, nil
	}
	if strings.Contains(s, "*") {
		return Mask{}, fmt.Errorf("invalid host mask %q: \"*\" is allowed only alone or as a leading \"*.\"", s)
	}
	name, err := hostName(s)
	if err != nil {
		return Mask{}, fmt.Errorf("invalid host name %q: %w", s, err)
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return Mask{}, fmt.Errorf("invalid host name %q: an address with a trailing dot; write %s", s, name)
	}
	return Mask{kind: Exact, name: name}, nil
}

// MustParse is Parse for masks known to be valid; it panics on error.
func MustParse(s string) Mask {
	m, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return m
}

func unmapPrefix(p netip.Prefix) netip.Prefix {
	a := p.Addr()
	if a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p
}

// looksLikeAddr reports whether s, which is not an address, was meant to
// be one: it has a colon (IPv6) or its last label is all digits (IPv4;
// no top-level domain is numeric).
func looksLikeAddr(s string) bool {
	if strings.Contains(s, ":") {
		return true
	}
	s = strings.TrimSuffix(s, ".")
	last := s[strings.LastIndexByte(s, '.')+1:]
	return last != "" && strings.Trim(last, "0123456789") == ""
}

// hostName checks a DNS name made of letters, digits, '-' and '_' labels
// and returns it in lower case without a trailing dot.
func hostName(s string) (string, error) {
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return "", fmt.Errorf("empty name")
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" {
			return "", fmt.Errorf("empty label")
		}
		if len(label) > 63 {
			return "", fmt.Errorf("label longer than 63 bytes")
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			switch {
			case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_':
			default:
				return "", fmt.Errorf("character %q not allowed in a host name", c)
			}
		}
	}
	return strings.ToLower(s), nil
}

// Kind returns the mask's kind.
func (m Mask) Kind() Kind { return m.kind }

// IsAny reports whether m is "*".
func (m Mask) IsAny() bool { return m.kind == Any }

// String returns the mask in the form Parse accepts.
func (m Mask) String() string {
	switch m.kind {
	case Any:
		return "*"
	case Exact:
		return m.name
	case Domain:
		return "*." + m.name
	case Network:
		return m.prefix.String()
	}
	return ""
}

// Peer is what a mask is matched against: a host name (may be empty or
// "unknown" when reverse DNS failed) and an address or network (may be
// invalid when unknown). A network stands for a client aggregated by prefix,
// as Postfix 3.8+ anvil idents do.
type Peer struct {
	Name string       // the host name ("unknown" or "" when none is known)
	Net  netip.Prefix // the address (a full-length prefix) or network; invalid when unknown
}

// PeerAddr returns a Peer for a single address.
func PeerAddr(name string, a netip.Addr) Peer {
	if !a.IsValid() {
		return Peer{Name: name}
	}
	a = a.Unmap().WithZone("")
	return Peer{Name: name, Net: netip.PrefixFrom(a, a.BitLen())}
}

// Match reports whether the peer falls under the mask. A network mask
// matches a peer network that lies entirely inside it.
func (m Mask) Match(p Peer) bool {
	switch m.kind {
	case Any:
		return true
	case Exact, Domain:
		if p.Name == "" {
			return false
		}
		n := strings.TrimSuffix(p.Name, ".")
		if len(n) < len(m.name) {
			return false
		}
		if m.kind == Exact {
			return strings.EqualFold(n, m.name)
		}
		if len(n) == len(m.name) {
			return strings.EqualFold(n, m.name)
		}
		suffix := n[len(n)-len(m.name):]
		return n[len(n)-len(m.name)-1] == '.' && strings.EqualFold(suffix, m.name)
	case Network:
		if !p.Net.IsValid() || p.Net.Bits() < m.prefix.Bits() {
			return false
		}
		return m.prefix.Contains(p.Net.Addr())
	}
	return false
}

// Covers reports whether m matches every peer that n matches, so that n
// can never decide where m is tried first. It is exact for single masks:
// "*" covers every mask; a network covers the networks inside it (a peer
// network that lies inside n lies inside m); "*.example.org" covers
// example.org, the names below it and the domain masks under it; a name
// covers itself. A name never covers a network or the reverse, since a
// peer may have either without the other. Several masks together may
// cover n where none does alone (10.0.0.0/9 and 10.128.0.0/9 hold every
// address of 10.0.0.0/8), but not every peer of n: a client aggregated
// as 10.0.0.0/8 falls in neither, so Covers is the whole test.
func (m Mask) Covers(n Mask) bool {
	switch m.kind {
	case Any:
		return n.kind != 0
	case Exact:
		return n.kind == Exact && n.name == m.name
	case Domain:
		return (n.kind == Exact || n.kind == Domain) && (n.name == m.name || strings.HasSuffix(n.name, "."+m.name))
	case Network:
		return n.kind == Network && m.prefix.Bits() <= n.prefix.Bits() && m.prefix.Contains(n.prefix.Addr())
	}
	return false
}
