package anvil

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	d := NewDecoder(strings.NewReader("request=connect\nident=smtp:192.0.2.1\n\nrequest=frobnicate\nident=x\n\n"), 0)
	m, err := d.Decode()
	if err != nil || m.Req != Connect || m.Ident != "smtp:192.0.2.1" || m.Name != "" {
		t.Fatalf("first: %+v %v", m, err)
	}
	m, err = d.Decode()
	if err != nil || m.Req != Unknown || m.Name != "frobnicate" {
		t.Fatalf("second: %+v %v", m, err)
	}
	if _, err := d.Decode(); !errors.Is(err, io.EOF) {
		t.Fatalf("end: %v", err)
	}
}

func TestDecodeMalformed(t *testing.T) {
	long := strings.Repeat("x", 2000)
	cases := []struct{ in, want string }{
		{"ident=a\nrequest=connect\n\n", `expected attribute "request", got "ident"`},
		{"request=connect\n\n", `missing attribute "ident"`},
		{"request=connect\nident=a\nextra=1\n\n", `unexpected attribute "extra" after ident`},
		{"request=connect\nident=a\nextra\n", `unexpected attribute "extra" after ident`},
		{"garbage\n", `attribute without "="`},
		{"\x00\x01\x02\n", `attribute without "="`},
		{"request=connect\nident=a\x00b\n\n", "NUL byte in ident value"},
		{"request=connect\nident=" + long + "\n\n", "line longer than 1024 bytes"},
		{"request=" + long, "line longer than 1024 bytes"},
		{"request=connect\nident=a\n", "stream ended inside a request"},
		{"request=connect\nide", "stream ended inside a request"},
		{"request=connect", "stream ended inside a request"},
		{"\n", `missing attribute "request"`},
	}
	for _, c := range cases {
		_, err := NewDecoder(strings.NewReader(c.in), 0).Decode()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Decode(%q) = %v, want %q", c.in, err, c.want)
		}
		if err != nil && !errors.Is(err, ErrProtocol) {
			t.Errorf("Decode(%q) error %v does not wrap ErrProtocol", c.in, err)
		}
	}
}

func TestReply(t *testing.T) {
	var r Reply
	r.Int("status", 0)
	r.Int("count", 12)
	r.Int("rate", -1)
	if got := string(r.Bytes()); got != "status=0\ncount=12\nrate=-1\n\n" {
		t.Fatalf("reply %q", got)
	}
	r.Reset()
	r.Int("status", -1)
	if got := string(r.Bytes()); got != "status=-1\n\n" {
		t.Fatalf("reply %q", got)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte("request=connect\nident=smtp:192.0.2.1\n\n"))
	f.Add([]byte("request=lookup\nident=smtp:2001:db8::/84\n\nrequest=disconnect\nident=smtp:192.0.2.1\n\n"))
	f.Add([]byte("request=x\nident=\n\n\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		d := NewDecoder(strings.NewReader(string(in)), 64)
		for range 100 {
			m, err := d.Decode()
			if err != nil {
				return
			}
			if len(m.Ident) > 64 || len(m.Name) > 64 {
				t.Fatalf("field over the line cap: %+v", m)
			}
		}
	})
}
