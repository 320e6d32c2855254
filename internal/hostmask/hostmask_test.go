package hostmask

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseErrors(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", "empty host mask"},
		{"a*b", "\"*\" is allowed only alone"},
		{"**", "\"*\" is allowed only alone"},
		{"*.", "empty name"},
		{"*.a..b", "empty label"},
		{"192.0.2.1/24", "host bits set (did you mean 192.0.2.0/24?)"},
		{"192.0.2.0/33", "invalid network"},
		{"fe80::1%eth0", "zones are not allowed"},
		{"host name", "not allowed in a host name"},
		{"a/b", "invalid network"},
		{"0.0.0.0.", "an address with a trailing dot; write 0.0.0.0"},
		{"300.1.2.3", `invalid address "300.1.2.3": IPv4 field has value >255`},
		{"192.168.1.300", `invalid address "192.168.1.300"`},
		{"192.168.1", `invalid address "192.168.1"`},
		{"10.0.0.0/33", "invalid network"},
		{"2001:db8::g", `invalid address "2001:db8::g"`},
		{"mx.example.300", `invalid host name "mx.example.300": its last label is a number`},
		{strings.Repeat("a", 300), "longer than"},
		{strings.Repeat("a", 64) + ".org", "label longer than 63"},
	}
	for _, c := range cases {
		_, err := Parse(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) error = %v, want it to contain %q", c.in, err, c.want)
		}
	}
}

func TestMatch(t *testing.T) {
	addr := func(s string) Peer { return PeerAddr("", netip.MustParseAddr(s)) }
	name := func(s string) Peer { return Peer{Name: s} }
	cases := []struct {
		mask string
		peer Peer
		want bool
	}{
		{"*", Peer{}, true},
		{"grasp.insa-lyon.fr", name("GRASP.insa-lyon.fr."), true},
		{"grasp.insa-lyon.fr", name("x.grasp.insa-lyon.fr"), false},
		{"*.insa-lyon.fr", name("insa-lyon.fr"), true},
		{"*.insa-lyon.fr", name("a.b.insa-lyon.fr"), true},
		{"*.insa-lyon.fr", name("xinsa-lyon.fr"), false},
		{"*.insa-lyon.fr", name("fr"), false},
		{"*.insa-lyon.fr", addr("192.0.2.1"), false},
		{"192.0.2.0/24", addr("192.0.2.77"), true},
		{"192.0.2.0/24", addr("::ffff:192.0.2.77"), true},
		{"192.0.2.0/24", addr("192.0.3.1"), false},
		{"192.0.2.9", addr("192.0.2.9"), true},
		{"::ffff:192.0.2.9", addr("192.0.2.9"), true},
		{"2001:db8::/32", addr("2001:db8:1::5"), true},
		{"2001:db8::/32", addr("2001:db9::5"), false},
		{"2001:db8::/32", Peer{Net: netip.MustParsePrefix("2001:db8:1::/84")}, true},
		{"2001:db8:1::/96", Peer{Net: netip.MustParsePrefix("2001:db8:1::/84")}, false},
		{"192.0.2.0/24", name("192.0.2.1"), false},
	}
	for _, c := range cases {
		m := MustParse(c.mask)
		if got := m.Match(c.peer); got != c.want {
			t.Errorf("%q.Match(%+v) = %v, want %v", c.mask, c.peer, got, c.want)
		}
	}
}

func TestStringRoundTrip(t *testing.T) {
	for _, s := range []string{"*", "*.example.org", "mx.example.org", "192.0.2.0/24", "192.0.2.1/32", "2001:db8::/32", "3com.com", "10.in-addr.arpa", "123.45.example.org", "*.0.example"} {
		m := MustParse(s)
		m2, err := Parse(m.String())
		if err != nil || m2 != m {
			t.Errorf("round trip %q -> %q: %v", s, m.String(), err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"*", "*.example.org", "mx.example.org", "192.0.2.0/24", "::1", "a*b", "fe80::1%eth0"} {
		f.Add(s, "host.example.org", "192.0.2.1")
	}
	f.Fuzz(func(t *testing.T, mask, host, addr string) {
		m, err := Parse(mask)
		if err != nil {
			return
		}
		m2, err := Parse(m.String())
		if err != nil || m2 != m {
			t.Fatalf("round trip of %q via %q: %v", mask, m.String(), err)
		}
		a, _ := netip.ParseAddr(addr)
		_ = m.Match(PeerAddr(host, a))
	})
}

// TestCovers checks Covers against its definition: every peer the
// covered mask matches, the covering one matches too, and where it does
// not, a peer shows it.
func TestCovers(t *testing.T) {
	cases := []struct {
		m, n string
		want bool
		peer Peer // when !want: a peer n matches and m does not
	}{
		{"*", "*", true, Peer{}},
		{"*", "10.0.0.0/8", true, Peer{}},
		{"*", "*.example.org", true, Peer{}},
		{"127.0.0.0/8", "127.0.0.2", true, Peer{}},
		{"127.0.0.0/8", "127.0.0.0/8", true, Peer{}},
		{"127.0.0.0/8", "127.1.0.0/16", true, Peer{}},
		{"127.1.0.0/16", "127.0.0.0/8", false, PeerAddr("", netip.MustParseAddr("127.2.0.1"))},
		{"10.0.0.0/9", "10.0.0.0/8", false, Peer{Net: netip.MustParsePrefix("10.0.0.0/8")}},
		{"127.0.0.0/8", "::1", false, PeerAddr("", netip.MustParseAddr("::1"))},
		{"::/0", "127.0.0.1", false, PeerAddr("", netip.MustParseAddr("127.0.0.1"))},
		{"2001:db8::/32", "2001:db8:1::/48", true, Peer{}},
		{"::ffff:127.0.0.0/104", "127.0.0.1", true, Peer{}}, // a mapped network is IPv4's
		{"*.example.org", "example.org", true, Peer{}},
		{"*.example.org", "mx.example.org", true, Peer{}},
		{"*.example.org", "*.mx.example.org", true, Peer{}},
		{"*.example.org", "*.example.org", true, Peer{}},
		{"*.example.org", "badexample.org", false, Peer{Name: "badexample.org"}},
		{"*.mx.example.org", "*.example.org", false, Peer{Name: "example.org"}},
		{"mx.example.org", "mx.example.org", true, Peer{}},
		{"mx.example.org", "*.mx.example.org", false, Peer{Name: "a.mx.example.org"}},
		{"mx.example.org", "mx2.example.org", false, Peer{Name: "mx2.example.org"}},
		{"*.example.org", "192.0.2.1", false, PeerAddr("mail.example.net", netip.MustParseAddr("192.0.2.1"))},
		{"192.0.2.0/24", "mx.example.org", false, PeerAddr("mx.example.org", netip.MustParseAddr("198.51.100.1"))},
		{"10.0.0.0/8", "*", false, Peer{Name: "mx.example.org"}},
		{"*.example.org", "*", false, Peer{Name: "mx.example.net"}},
	}
	for _, c := range cases {
		m, n := MustParse(c.m), MustParse(c.n)
		if got := m.Covers(n); got != c.want {
			t.Errorf("%q.Covers(%q) = %v, want %v", c.m, c.n, got, c.want)
		}
		if !c.want && (!n.Match(c.peer) || m.Match(c.peer)) {
			t.Errorf("the case %q, %q: peer %+v should match %q and not %q", c.m, c.n, c.peer, c.n, c.m)
		}
	}
	if (Mask{}).Covers(MustParse("*")) || MustParse("*").Covers(Mask{}) {
		t.Error("the zero Mask matches nothing: it neither covers nor is covered")
	}
}
