package netserve

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"sluice/internal/peercred/peercredtest"
	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/peer"
)

// peerServer is a server of echoLines with limits o, logging to logs.
func peerServer(logs *logbuf.Buffer, o Options) *Server {
	o.Name, o.Logger = "door", slog.New(slog.NewTextHandler(logs, nil))
	o.IdleTimeout, o.RequestTimeout = -1, -1
	return New(o, echoLines)
}

// serveOn serves s on a new listener of network ("tcp": 127.0.0.1; "unix":
// a socket every user may connect to) and returns its address; the server
// is shut down at the test's end, which must go cleanly.
func serveOn(t *testing.T, s *Server, network string) string {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		dir, err := os.MkdirTemp("", "netserve-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		addr = filepath.Join(dir, "s")
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	if network == "unix" {
		if err := os.Chmod(addr, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	return serveListener(t, s, l)
}

func serveListener(t *testing.T, s *Server, l net.Listener) string {
	t.Helper()
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return l.Addr().String()
}

// client is one connection of this process.
type client struct {
	net.Conn
	r *bufio.Reader
}

func dialClient(t *testing.T, network, addr string) client {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second)) // against a hang only
	return client{c, bufio.NewReader(c)}
}

// served fails t unless the connection is served: msg comes back.
func (c client) served(t *testing.T, msg string) {
	t.Helper()
	if _, err := io.WriteString(c, msg+"\n"); err != nil {
		t.Fatalf("%s: %v", msg, err)
	}
	if got, err := c.r.ReadString('\n'); err != nil || got != msg+"\n" {
		t.Fatalf("%s: read %q %v; want it served", msg, got, err)
	}
}

// refused fails t unless the server closed the connection without a word.
func (c client) refused(t *testing.T, what string) {
	t.Helper()
	if got, err := c.r.ReadString('\n'); !errors.Is(err, io.EOF) {
		t.Fatalf("%s: read %q %v; want EOF (refused)", what, got, err)
	}
}

// waitConns waits until s serves n connections (30 s bound against a
// hang).
func waitConns(t *testing.T, s *Server, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); s.Conns() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open, want %d", s.Conns(), n)
		}
	}
}

// TestMaxConnsPerPeerOwnUser: one user's connections beyond the per-peer
// cap are refused; one that ends makes room for the next.
func TestMaxConnsPerPeerOwnUser(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			var logs logbuf.Buffer
			s := peerServer(&logs, Options{ConnLimits: ConnLimits{MaxConns: 10, PeerLimits: PeerLimits{MaxConnsPerPeer: 2}}})
			addr := serveOn(t, s, network)
			a, b := dialClient(t, network, addr), dialClient(t, network, addr)
			a.served(t, "a")
			b.served(t, "b")
			dialClient(t, network, addr).refused(t, "third of one user")
			logs.WaitFor(t, "door: too many connections from one peer", `peer="uid `+strconv.Itoa(os.Geteuid())+`"`, "max_conns_per_peer=2", "refused_total=1")
			a.Close()
			waitConns(t, s, 1)
			dialClient(t, network, addr).served(t, "after one ended")
		})
	}
}

// TestMaxConnsPerPeerOtherUser: a user (nobody, in a child process) who
// opens more connections than the per-peer cap gets the cap and no more,
// and another user still gets in: the door is not theirs to fill.
// Before the per-peer cap, nobody's connections took the whole door.
func TestMaxConnsPerPeerOtherUser(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			var logs logbuf.Buffer
			s := peerServer(&logs, Options{ConnLimits: ConnLimits{MaxConns: 4, PeerLimits: PeerLimits{MaxConnsPerPeer: 2}}})
			addr := serveOn(t, s, network)
			h := peercredtest.Hold(t, "nobody", network, addr, 4)
			h.WaitClosed(t, 2)
			waitConns(t, s, 2)
			logs.WaitFor(t, "door: too many connections from one peer", `peer="uid `+strconv.Itoa(h.UID)+`"`)
			dialClient(t, network, addr).served(t, "another user")
			dialClient(t, network, addr).served(t, "and another connection of it")
			dialClient(t, network, addr).refused(t, "the door is full")
		})
	}
}

// TestMaxConnsUnlisted is two local accounts against a door without an
// allow list: nobody and sluice (in child processes) each open as many
// connections as the door holds. Each is under its per-peer cap (half of
// the door), so before MaxConnsUnlisted the two together took every
// place and root was refused; with it they hold the unlisted share
// between them (nobody all of it, sluice none: it came second), and root
// (this process, listed) still gets the rest.
func TestMaxConnsUnlisted(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			const door = 8
			var logs logbuf.Buffer
			s := peerServer(&logs, Options{ConnLimits: ConnLimits{MaxConns: door, PeerLimits: PeerLimits{MaxConnsPerPeer: door / 2, MaxConnsUnlisted: door / 2}}})
			addr := serveOn(t, s, network)
			nobody := peercredtest.Hold(t, "nobody", network, addr, door)
			nobody.WaitClosed(t, door/2)
			waitConns(t, s, door/2)
			sluice := peercredtest.Hold(t, "sluice", network, addr, door)
			sluice.WaitClosed(t, door)
			logs.WaitFor(t, "door: too many connections from peers other than root, this process's user and allow_users", `peer="uid `+strconv.Itoa(sluice.UID)+`"`, "max_conns_unlisted=4", "refused_total=1")
			for i := range door / 2 {
				dialClient(t, network, addr).served(t, "root's connection "+strconv.Itoa(i+1))
			}
			dialClient(t, network, addr).refused(t, "the door is full")
			// nobody leaves: its share is sluice's to take.
			nobody.Release()
			waitConns(t, s, door/2)
			again := peercredtest.Hold(t, "sluice", network, addr, door)
			again.WaitClosed(t, door/2)
			waitConns(t, s, door)
		})
	}
}

// TestAllowUIDs: a connection from a user not in AllowUIDs is closed at
// once and logged with its uid; an allowed user is served; an empty
// (not nil) list lets no one in.
func TestAllowUIDs(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			var logs logbuf.Buffer
			s := peerServer(&logs, Options{ConnLimits: ConnLimits{PeerLimits: PeerLimits{AllowUIDs: []int{os.Geteuid()}}}})
			addr := serveOn(t, s, network)
			h := peercredtest.Hold(t, "nobody", network, addr, 3)
			h.WaitClosed(t, 3)
			logs.WaitFor(t, "door: the peer is not an allowed user; closed its connection", "uid="+strconv.Itoa(h.UID), "refused_total=1")
			logs.WaitFor(t, "uid="+strconv.Itoa(h.UID), "refused_total=2")
			if n := len(logs.Lines("not an allowed user")); n != 2 {
				t.Errorf("%d log lines for 3 refusals, want 2 (the 1st and 2nd):\n%s", n, logs.String())
			}
			dialClient(t, network, addr).served(t, "allowed user")
		})
	}
	var logs logbuf.Buffer
	s := peerServer(&logs, Options{ConnLimits: ConnLimits{PeerLimits: PeerLimits{AllowUIDs: []int{}}}})
	addr := serveOn(t, s, "tcp")
	dialClient(t, "tcp", addr).refused(t, "empty allow list")
}

// TestPeerByAddress: a TCP peer off loopback is counted by its address,
// and has no uid for an allow list: it is unlisted.
func TestPeerByAddress(t *testing.T) {
	ip := peercredtest.HostAddr()
	if !ip.IsValid() {
		peer.Missing(t, "a non-loopback IPv4 address on this host (the peer off loopback)", nil)
	}
	for _, allow := range []bool{false, true} {
		var logs logbuf.Buffer
		o := Options{ConnLimits: ConnLimits{PeerLimits: PeerLimits{MaxConnsPerPeer: 1}}}
		if allow {
			o.AllowUIDs = []int{os.Geteuid()}
		}
		s := peerServer(&logs, o)
		l, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
		if err != nil {
			t.Fatal(err)
		}
		addr := serveListener(t, s, l)
		if allow {
			dialClient(t, "tcp", addr).refused(t, "off-loopback peer with an allow list")
			logs.WaitFor(t, "not an allowed user", "remote="+ip.String())
			continue
		}
		dialClient(t, "tcp", addr).served(t, "first from "+ip.String())
		dialClient(t, "tcp", addr).refused(t, "second from "+ip.String())
		logs.WaitFor(t, "too many connections from one peer", "peer="+ip.String())
	}
	// A host has no uid: it is an unlisted peer.
	var logs logbuf.Buffer
	s := peerServer(&logs, Options{ConnLimits: ConnLimits{PeerLimits: PeerLimits{MaxConnsUnlisted: 1}}})
	l, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	addr := serveListener(t, s, l)
	dialClient(t, "tcp", addr).served(t, "first from "+ip.String())
	dialClient(t, "tcp", addr).refused(t, "second from "+ip.String()+", the unlisted share full")
	logs.WaitFor(t, "too many connections from peers other than root", "peer="+ip.String(), "max_conns_unlisted=1")
}

// TestPeerRefuseHook: a connection over the per-peer cap goes to
// Options.Refuse, as one over MaxConns does.
func TestPeerRefuseHook(t *testing.T) {
	var logs logbuf.Buffer
	s := peerServer(&logs, Options{
		ConnLimits: ConnLimits{PeerLimits: PeerLimits{MaxConnsPerPeer: 1}},
		Refuse:     func(c net.Conn) { io.WriteString(c, "busy\n") },
	})
	addr := serveOn(t, s, "tcp")
	dialClient(t, "tcp", addr).served(t, "first")
	c := dialClient(t, "tcp", addr)
	if got, err := c.r.ReadString('\n'); err != nil || got != "busy\n" {
		t.Fatalf("second: %q %v, want busy", got, err)
	}
}

// BenchmarkConnLife: a connection's whole life through Serve (dial,
// accept, one line echoed, close) without per-peer rules, and with a
// per-peer cap (which learns every peer's uid: sock_diag on TCP,
// SO_PEERCRED on a unix socket). The difference is what the rule costs
// per accept.
func BenchmarkConnLife(b *testing.B) {
	for _, tc := range []struct {
		name, network string
		perPeer       int
	}{{"tcp/none", "tcp", 0}, {"tcp/per-peer", "tcp", 2048}, {"unix/none", "unix", 0}, {"unix/per-peer", "unix", 2048}} {
		b.Run(tc.name, func(b *testing.B) {
			s := New(Options{Logger: slog.New(slog.DiscardHandler), ConnLimits: ConnLimits{PeerLimits: PeerLimits{MaxConnsPerPeer: tc.perPeer}}}, echoLines)
			addr := "127.0.0.1:0"
			if tc.network == "unix" {
				addr = filepath.Join(b.TempDir(), "s")
			}
			l, err := net.Listen(tc.network, addr)
			if err != nil {
				b.Fatal(err)
			}
			go s.Serve(l)
			defer s.Close()
			buf := make([]byte, 2)
			for b.Loop() {
				c, err := net.Dial(tc.network, l.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.WriteString(c, "x\n"); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}
