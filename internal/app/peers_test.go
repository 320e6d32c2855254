package app

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"sluice/internal/anvil/anviltest"
	"sluice/internal/control"
	"sluice/internal/milter/miltest"
	"sluice/internal/milter/wire"
	"sluice/internal/peercred/peercredtest"
	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/peer"
	"sluice/internal/throttle"
)

// TestLoopbackIsNotAuthentication is issue 25's and issue 40's probe
// against every door on an inet loopback listener, with its default
// per-peer rules: two other local users (nobody, then sluice, each in a
// child process) each open as many idle connections as the door holds,
// and the MTA (this process, as root) must still connect and get an
// answer. The per-peer cap (half of the door) stops nobody at 2; the
// unlisted peers' share (half of the door) stops sluice at 0, and keeps
// the other half for root. Before the per-peer cap nobody's connections
// filled the door; before the unlisted share nobody's and sluice's did;
// either way the MTA's was closed unanswered (EOF).
func TestLoopbackIsNotAuthentication(t *testing.T) {
	const door = 4 // max_conns (max_sessions): nobody may hold 2, sluice none
	doors := []struct {
		name, capKey string
		extra        string
		// ask connects as the MTA, asks, checks the answer, and returns
		// the connection, still open.
		ask   func(t *testing.T, addr string) io.Closer
		conns func(d *Daemon) int
	}{
		{"anvil", "max_conns", "", askAnvil, func(d *Daemon) int { return d.anvil.Conns() }},
		{"policy", "max_conns", "", askPolicy, func(d *Daemon) int { return d.policy.Conns() }},
		// A client is idle as long as its request_timeout: nobody's must
		// outlast the test.
		{"throttle", "max_conns", "request_timeout = \"1h\"\n", askThrottle, func(d *Daemon) int { return d.throttle.Conns() }},
		{"milter", "max_sessions", "", askMilter, func(d *Daemon) int { return d.milter.Sessions() }},
	}
	for _, dr := range doors {
		t.Run(dr.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := fmt.Sprintf("state_dir = %q\n", dir)
			for _, other := range doors {
				if other.name != dr.name {
					cfg += fmt.Sprintf("[%s]\nenabled = false\n", other.name)
				}
			}
			cfg += fmt.Sprintf("[%s]\nlisten = [\"inet:127.0.0.1:0\"]\n%s = %d\n%s", dr.name, dr.capKey, door, dr.extra)
			var logs logbuf.Buffer
			d := startDaemonLog(t, writeConfig(t, dir, cfg), slog.New(slog.NewTextHandler(&logs, nil)))
			addr := d.Addrs()[0].String()

			h := peercredtest.Hold(t, "nobody", "tcp", addr, door)
			h2 := peercredtest.Hold(t, "sluice", "tcp", addr, door)
			// nobody's connections, then sluice's, are queued ahead of
			// ours, and the door takes them in order.
			mta := dr.ask(t, addr)
			defer mta.Close()
			h.WaitClosed(t, door/2)
			h2.WaitClosed(t, door)
			if n := dr.conns(d); n != door/2+1 {
				t.Errorf("%d connections open, want nobody's %d and ours", n, door/2)
			}
			logs.WaitFor(t, dr.name+": too many connections from one peer", `peer="uid `+strconv.Itoa(h.UID)+`"`)
			logs.WaitFor(t, dr.name+": too many connections from peers other than root", `peer="uid `+strconv.Itoa(h2.UID)+`"`, "max_conns_unlisted=2")
		})
	}
}

func askAnvil(t *testing.T, addr string) io.Closer {
	t.Helper()
	cl, err := anviltest.Dial("tcp", addr, false)
	if err != nil {
		t.Fatalf("the MTA's anvil connection: %v", err)
	}
	t.Cleanup(func() { cl.Close() })
	if got, err := cl.Do("connect", "smtp:192.0.2.1"); err != nil || got["count"] < 1 {
		t.Fatalf("anvil connect: %v %v", got, err)
	}
	return cl
}

func askPolicy(t *testing.T, addr string) io.Closer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprint(c, "request=smtpd_access_policy\nprotocol_state=RCPT\nclient_address=192.0.2.1\n\n"); err != nil {
		t.Fatal(err)
	}
	if verb, err := readPolicyAction(bufio.NewReader(c)); err != nil || verb != "DUNNO" {
		t.Fatalf("the MTA's policy request: %q %v, want DUNNO", verb, err)
	}
	return c
}

func askThrottle(t *testing.T, addr string) io.Closer {
	t.Helper()
	cl, err := throttle.Dial("tcp", addr, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	var deferred *throttle.DeferError
	if _, err := cl.Acquire("relay.example.org"); err != nil && !errors.As(err, &deferred) {
		t.Fatalf("the sender's throttle request: %v", err)
	}
	return cl
}

func askMilter(t *testing.T, addr string) io.Closer {
	t.Helper()
	m, err := miltest.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if err := m.Negotiate(6, wire.AllActions, wire.AllProtocol); err != nil {
		t.Fatalf("the MTA's milter negotiation: %v", err)
	}
	r, err := m.Command(&wire.Connect{Host: "[192.0.2.1]", Family: wire.FamilyInet, Port: 4711, Addr: "192.0.2.1"})
	if err != nil || r.Code() != wire.RespContinue {
		t.Fatalf("the MTA's CONNECT: %v %v, want continue", r, err)
	}
	return m
}

// TestControlUnlistedShare: a member of the control socket's admin group
// (nobody, whose group nogroup is admin_group here) opens as many
// connections as the socket holds; half of them are closed, and root's
// command, queued behind them, is answered. Before the unlisted share
// nobody held every place and root's connection was closed unanswered.
func TestControlUnlistedShare(t *testing.T) {
	const places = 4 // control.max_conns: nobody may hold 2
	peer.Group(t, "nogroup")
	run, err := os.MkdirTemp("", "sluice-control-") // a directory nobody may enter
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(run) })
	if err := os.Chmod(run, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf("state_dir = %q\nruntime_dir = %q\n[anvil]\nenabled = false\n[policy]\nenabled = false\n[throttle]\nenabled = false\n[milter]\nenabled = false\n[web]\nlisten = []\n[control]\nadmin_group = \"nogroup\"\nmax_conns = %d\n", dir, run, places)
	var logs logbuf.Buffer
	startDaemonLog(t, writeConfig(t, dir, cfg), slog.New(slog.NewTextHandler(&logs, nil)))
	sock := filepath.Join(run, "control")
	h := peercredtest.Hold(t, "nobody", "unix", sock, places)
	if r := ask(t, sock, control.Request{Command: "exempt.list"}); !r.OK {
		t.Fatalf("root's command behind nobody's %d connections: %+v", places, r)
	}
	h.WaitClosed(t, places/2)
	logs.WaitFor(t, "control: too many connections from peers other than root", `peer="uid `+strconv.Itoa(h.UID)+`"`, "max_conns_unlisted=2")
}
