package escalate

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestParseRequest(t *testing.T) {
	good := []struct {
		line string
		addr string
		secs int64
	}{
		{"add 192.0.2.7 600\n", "192.0.2.7", 600},
		{"add 192.0.2.7 1", "192.0.2.7", 1},
		{"add 2001:db8::1 86400\n", "2001:db8::1", 86400},
		{"add ::ffff:192.0.2.7 60\n", "192.0.2.7", 60}, // mapped: the IPv4 set
	}
	for _, c := range good {
		r, err := ParseRequest(c.line)
		if err != nil || r.Addr != netip.MustParseAddr(c.addr) || r.For != time.Duration(c.secs)*time.Second {
			t.Errorf("ParseRequest(%q) = %v, %v; want %s for %ds", c.line, r, err, c.addr, c.secs)
		}
	}
	bad := []struct{ line, want string }{
		{"", `want "add ADDRESS SECONDS"`},
		{"\n", `want "add ADDRESS SECONDS"`},
		{"add 192.0.2.7\n", `want "add ADDRESS SECONDS"`},
		{"add 192.0.2.7 600 extra\n", `want "add ADDRESS SECONDS"`},
		{"del 192.0.2.7 600\n", `want "add ADDRESS SECONDS"`},
		{"ADD 192.0.2.7 600\n", `want "add ADDRESS SECONDS"`},
		{"add  192.0.2.7 600\n", `want "add ADDRESS SECONDS"`},
		{"add 192.0.2.7 600\r\n", "is not a number of seconds"},
		{"add 192.0.2.0/24 600\n", "is not an IP address"},
		{"add fe80::1%eth0 600\n", "is not an IP address"},
		{"add example.org 600\n", "is not an IP address"},
		{"add 192.0.2.7 0\n", "is not a number of seconds"},
		{"add 192.0.2.7 -5\n", "is not a number of seconds"},
		{"add 192.0.2.7 +5\n", "is not a number of seconds"},
		{"add 192.0.2.7 86401\n", "is not a number of seconds"},
		{"add 192.0.2.7 99999999999999999999\n", "is not a number of seconds"},
		{"add 192.0.2.7 " + strings.Repeat("1", MaxLine) + "\n", "longer than 128 bytes"},
	}
	for _, c := range bad {
		_, err := ParseRequest(c.line)
		if !errors.Is(err, ErrLine) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseRequest(%q) = %v, want ErrLine with %q", c.line, err, c.want)
		}
	}
}

func TestRequestFormat(t *testing.T) {
	r := Request{Addr: netip.MustParseAddr("2001:db8::7"), For: 10*time.Minute + 400*time.Millisecond}
	if got := r.Format(); got != "add 2001:db8::7 600\n" {
		t.Fatalf("Format = %q", got)
	}
	back, err := ParseRequest(r.Format())
	if err != nil || back.Addr != r.Addr || back.For != 10*time.Minute {
		t.Fatalf("round trip: %v %v", back, err)
	}
}

func TestAnswer(t *testing.T) {
	if a := Answer(nil); a != "ok\n" || ParseAnswer(a) != nil {
		t.Fatalf("Answer(nil) = %q", a)
	}
	long := errors.New("nft: set full\nsecond line " + strings.Repeat("x", 300))
	a := Answer(long)
	if len(a) > MaxLine || strings.Count(a, "\n") != 1 || !strings.HasPrefix(a, "error nft: set full second line") {
		t.Fatalf("Answer(long) = %q (%d bytes)", a, len(a))
	}
	if err := ParseAnswer(a); err == nil || !strings.Contains(err.Error(), "helper: nft: set full") {
		t.Fatalf("ParseAnswer(%q) = %v", a, err)
	}
	for _, line := range []string{"", "OK\n", "okay\n", "error\n", "ok ok\n", strings.Repeat("e", MaxLine) + "\n"} {
		if err := ParseAnswer(line); err == nil {
			t.Errorf("ParseAnswer(%q) = nil, want an error", line)
		}
	}
}

// FuzzParseRequest: no line panics the parser; a request it accepts
// formats back to a line it parses to the same request.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{"add 192.0.2.7 600\n", "add 2001:db8::1 1", "add ::ffff:1.2.3.4 86400\n", "del x 1\n", "add 1.2.3.4 0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		r, err := ParseRequest(line)
		if err != nil {
			if !errors.Is(err, ErrLine) {
				t.Fatalf("error %v is not ErrLine", err)
			}
			return
		}
		back, err := ParseRequest(r.Format())
		if err != nil || back != r {
			t.Fatalf("%q: %v formats to %q, which parses to %v, %v", line, r, r.Format(), back, err)
		}
		_ = ParseAnswer(line)
	})
}
