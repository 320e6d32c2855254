//go:build linux

package peercred

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"sluice/internal/peercred/peercredtest"
)

// accept returns the next connection on l, failing t on error.
func accept(t testing.TB, l net.Listener) net.Conn {
	t.Helper()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// listen listens on network and address, failing t on error (or skipping
// the test for an address family the host lacks).
func listen(t testing.TB, network, addr string) net.Listener {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		if addr == "[::1]:0" {
			t.Skipf("no IPv6 loopback: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func dial(t testing.TB, network, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// wantUID checks UID on c.
func wantUID(t testing.TB, what string, c net.Conn, want int) {
	t.Helper()
	got, err := UID(c)
	if err != nil || got != want {
		t.Errorf("%s: UID = %d, %v; want %d", what, got, err, want)
	}
}

// TestOwnConnections: a connection this process makes reports its own
// uid at both ends, on a unix socket and on TCP over IPv4 and IPv6
// loopback.
func TestOwnConnections(t *testing.T) {
	me := os.Geteuid()
	for _, tc := range []struct{ network, addr string }{
		{"unix", filepath.Join(t.TempDir(), "s")},
		{"tcp", "127.0.0.1:0"},
		{"tcp", "[::1]:0"},
	} {
		l := listen(t, tc.network, tc.addr)
		c := dial(t, tc.network, l.Addr().String())
		s := accept(t, l)
		wantUID(t, tc.network+" "+tc.addr+" server side", s, me)
		wantUID(t, tc.network+" "+tc.addr+" client side", c, me)
	}
}

// TestMappedAddresses: on a dual-stack listener an IPv4 peer arrives as an
// IPv4-mapped IPv6 address; an IPv6 socket connected to a mapped address
// is found too (the kernel reports it as AF_INET6 on mapped addresses).
func TestMappedAddresses(t *testing.T) {
	l, err := net.Listen("tcp", "[::]:0")
	if err != nil {
		t.Skipf("no dual-stack listener: %v", err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	c := dial(t, "tcp4", netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)).String())
	s := accept(t, l)
	wantUID(t, "IPv4 peer on a dual-stack listener", s, os.Geteuid())
	_ = c

	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sa := &unix.SockaddrInet6{Port: port, Addr: netip.MustParseAddr("::ffff:127.0.0.1").As16()}
	if err := unix.Connect(fd, sa); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "v6 mapped")
	mc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	s = accept(t, l)
	wantUID(t, "IPv6 socket on a mapped address", s, os.Geteuid())
}

// TestOtherUser: connections a child process running as nobody makes
// report nobody's uid, on TCP loopback and on a unix socket.
func TestOtherUser(t *testing.T) {
	dir, err := os.MkdirTemp("", "peercred-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s")
	for _, tc := range []struct{ network, addr string }{{"tcp", "127.0.0.1:0"}, {"unix", sock}} {
		l := listen(t, tc.network, tc.addr)
		if tc.network == "unix" {
			if err := os.Chmod(sock, 0o666); err != nil {
				t.Fatal(err)
			}
		}
		h := peercredtest.Hold(t, "nobody", tc.network, l.Addr().String(), 1)
		s := accept(t, l)
		wantUID(t, tc.network+" from nobody", s, h.UID)
		h.Release()
	}
}

// TestNotLocal: a TCP peer off loopback has no local uid, and no query is
// made for it; a four-tuple no socket has gives ErrGone.
func TestNotLocal(t *testing.T) {
	local := netip.MustParseAddrPort("192.0.2.1:8891")
	remote := netip.MustParseAddrPort("192.0.2.7:40000")
	if _, err := tcpUID(local, remote); !errors.Is(err, ErrNotLocal) {
		t.Errorf("192.0.2.7: %v, want ErrNotLocal", err)
	}
	// A real connection to this host's own non-loopback address.
	if ip := peercredtest.HostAddr(); ip.IsValid() {
		l := listen(t, "tcp", netip.AddrPortFrom(ip, 0).String())
		dial(t, "tcp", l.Addr().String())
		s := accept(t, l)
		if _, err := UID(s); !errors.Is(err, ErrNotLocal) {
			t.Errorf("peer at %v: %v, want ErrNotLocal", s.RemoteAddr(), err)
		}
	}
	// Port 1 of 127.0.0.1 connected to port 2: no such socket.
	_, err := tcpUID(netip.MustParseAddrPort("127.0.0.1:2"), netip.MustParseAddrPort("127.0.0.1:1"))
	if !errors.Is(err, ErrGone) {
		t.Errorf("no such socket: %v, want ErrGone", err)
	}
}

// BenchmarkUID: what learning a peer's uid costs per accepted
// connection: a sock_diag round trip for TCP loopback (a netlink socket
// opened, one request, one reply, closed), one getsockopt for a unix
// socket.
func BenchmarkUID(b *testing.B) {
	for _, tc := range []struct{ name, network, addr string }{
		{"tcp4", "tcp", "127.0.0.1:0"},
		{"tcp6", "tcp", "[::1]:0"},
		{"unix", "unix", filepath.Join(b.TempDir(), "s")},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l := listen(b, tc.network, tc.addr)
			dial(b, tc.network, l.Addr().String())
			s := accept(b, l)
			for b.Loop() {
				if _, err := UID(s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestUnixCred: a unix socket's peer reports this process's uid, gid and
// pid.
func TestUnixCred(t *testing.T) {
	l := listen(t, "unix", filepath.Join(t.TempDir(), "s"))
	dial(t, "unix", l.Addr().String())
	s := accept(t, l)
	got, err := Unix(s.(*net.UnixConn))
	want := Cred{UID: os.Geteuid(), GID: os.Getegid(), PID: os.Getpid()}
	if err != nil || got != want {
		t.Fatalf("Unix = %+v, %v; want %+v", got, err, want)
	}
}

// TestPID: a unix peer's pid is the connecting process's (here this one);
// a TCP connection has none.
func TestPID(t *testing.T) {
	l := listen(t, "unix", filepath.Join(t.TempDir(), "s"))
	dial(t, "unix", l.Addr().String())
	if got, err := PID(accept(t, l)); err != nil || got != os.Getpid() {
		t.Errorf("unix: PID = %d, %v; want %d", got, err, os.Getpid())
	}
	tl := listen(t, "tcp", "127.0.0.1:0")
	dial(t, "tcp", tl.Addr().String())
	if got, err := PID(accept(t, tl)); err == nil {
		t.Errorf("tcp: PID = %d, nil; want an error", got)
	}
}
