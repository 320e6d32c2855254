package muxd

import (
	"net"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

func TestSocketForms(t *testing.T) {
	for in, want := range map[string]addr{
		"/run/x.sock":      {network: "unix", path: "/run/x.sock"},
		"unix:/run/x":      {network: "unix", path: "/run/x"},
		"local:rel":        {network: "unix", path: "rel"},
		"bogus:1":          {network: "unix", path: "bogus:1"},
		"inet:4000":        {network: "tcp4", ip: net.IPv4(127, 0, 0, 1), port: 4000},
		"inet_any:4000":    {network: "tcp4", ip: net.IPv4zero, port: 4000},
		"inet6:4000":       {network: "tcp6", ip: net.IPv6loopback, port: 4000},
		"inet6_any:65535":  {network: "tcp6", ip: net.IPv6unspecified, port: 65535},
		"inet:0":           {},
		"inet:99999":       {},
		"inet6_any:abc":    {},
		"inet_any:":        {},
		"unix:inet:weird:": {network: "unix", path: "inet:weird:"},
	} {
		got, err := parseSocket(in, true)
		if want.network == "" {
			if err == nil {
				t.Errorf("%q: no error", in)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: %+v %v, want %+v", in, got, err, want)
		}
	}
	if _, err := parseSocket("inet:4000", false); err == nil || err.Error() != "Argument to -s option must be a UNIX-domain socket, not a TCP socket." {
		t.Errorf("-s inet: %v", err)
	}
	// Real listeners on every inet form (loopback ones only); listen
	// sets the process umask.
	mask := syscall.Umask(0o022)
	defer syscall.Umask(mask)
	for _, s := range []string{"inet:0", "inet6:0"} {
		a, _ := parseSocket(strings.Replace(s, ":0", ":1", 1), true)
		a.port = 0
		ln, err := listen(a, 7, 0o077, 0o077)
		if err != nil {
			if s == "inet6:0" {
				t.Logf("no IPv6 loopback: %v", err)
				continue
			}
			t.Fatal(err)
		}
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Errorf("%s: %v", s, err)
		} else {
			c.Close()
		}
		ln.Close()
	}
}
