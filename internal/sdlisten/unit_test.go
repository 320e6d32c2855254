package sdlisten

import (
	"strings"
	"testing"
)

func TestParseSocketUnit(t *testing.T) {
	unit := `# a comment
[Unit]
Description=ListenStream=/not/this/one
[Socket]
ListenStream=/var/spool/postfix/private/anvil
; another comment
ListenStream = 127.0.0.1:8891
ListenStream=9465
ListenStream=[::1]:10040
SocketMode=0600
[Install]
ListenStream=/ignored
`
	got, err := ParseSocketUnit([]byte(unit))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		line         int
		addr         string
		network, cfg string // a listen address of a configuration that names it
	}{
		{5, "/var/spool/postfix/private/anvil", "unix", "/var/spool/postfix/private/anvil/"},
		{7, "127.0.0.1:8891", "tcp", "127.0.0.1:8891"},
		{8, "[::]:9465", "tcp", "[::]:9465"},
		{9, "[::1]:10040", "tcp", "[::1]:10040"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d listens %v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		if got[i].Line != w.line || got[i].Addr.String() != w.addr || !got[i].Names(w.network, w.cfg) {
			t.Errorf("listen %d: %+v (%s), want line %d %s naming %s %s", i, got[i], got[i].Addr, w.line, w.addr, w.network, w.cfg)
		}
	}
	if got[1].Names("tcp", "127.0.0.1:8892") || got[1].Names("unix", "127.0.0.1:8891") || got[2].Names("tcp", "0.0.0.0:9465") {
		t.Error("a listen names an address that is not its own")
	}
	reset, err := ParseSocketUnit([]byte("[Socket]\nListenStream=/a\nListenStream=\nListenStream=/b\n"))
	if err != nil || len(reset) != 1 || reset[0].Value != "/b" {
		t.Errorf("an empty ListenStream= resets the list: %+v %v", reset, err)
	}
}

func TestParseSocketUnitErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"abstract", "[Socket]\nListenStream=@sluice\n", "line 2: ListenStream=@sluice: an abstract socket"},
		{"interface", "[Socket]\nListenStream=[fe80::1%eth0]:25\n", "an interface suffix"},
		{"host name", "[Socket]\nListenStream=localhost:25\n", `"localhost" is not a numeric IP address`},
		{"port zero", "[Socket]\nListenStream=0\n", "port 0"},
		{"port too big", "[Socket]\nListenStream=127.0.0.1:70000\n", `port "70000"`},
		{"garbage", "[Socket]\nListenStream=not an address\n", "neither a path nor a port"},
		{"datagram", "[Socket]\nListenDatagram=/run/x\n", "line 2: ListenDatagram= is not a stream socket"},
		{"no equals", "[Socket]\nListenStream\n", `line 2: "ListenStream" is not KEY=VALUE`},
		{"nul in path", "[Socket]\nListenStream=/a\x00b\n", "a path with a NUL byte"},
		{"line too long", "[Socket]\nListenStream=/" + strings.Repeat("a", 5000) + "\n", "line 2: bufio.Scanner: token too long"},
	} {
		_, err := ParseSocketUnit([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func FuzzParseSocketUnit(f *testing.F) {
	f.Add([]byte("[Socket]\nListenStream=/run/sluice/milter\nListenStream=127.0.0.1:8891\n"))
	f.Add([]byte("[Socket]\nListenStream=[::1]:1\nListenStream=\n"))
	f.Add([]byte("[Socket]\nListenFIFO=/x\n"))
	f.Add([]byte("[Service]\nUser=sluice\nProtectSystem=strict\nReadWritePaths=-/var/spool/postfix/sluice\nStateDirectory=sluice\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		// The same unit-file format: a service unit too (check -service-unit).
		if u, err := ParseServiceUnit(b); err == nil {
			u.CanWrite("/var/spool/postfix/sluice")
		}
		ls, err := ParseSocketUnit(b)
		if err != nil {
			return
		}
		for _, l := range ls {
			if l.Addr == nil || l.Line < 1 || l.Value == "" {
				t.Fatalf("%+v", l)
			}
			// A socket names its own address.
			if !l.Names(l.Addr.Network(), l.Addr.String()) {
				t.Fatalf("%+v does not name %s %s", l, l.Addr.Network(), l.Addr)
			}
		}
	})
}
