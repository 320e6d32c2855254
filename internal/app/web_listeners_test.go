package app

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sluice/internal/config"
	"sluice/internal/peercred/peercredtest"
	"sluice/internal/testutil/logbuf"
	"sluice/internal/web"
)

// webListenersConfig is a daemon whose web server listens as
// examples/sluice.toml has it, on the unix socket "web" and on a loopback
// port, with no mail door; extra is appended to [web].
func webListenersConfig(dir, extra string) string {
	return fmt.Sprintf(`state_dir = %q
[anvil]
enabled = false
[policy]
enabled = false
[throttle]
enabled = false
[milter]
enabled = false
[web]
listen = ["unix:web", "inet:127.0.0.1:0"]
metrics = true
%s`, dir, extra)
}

// webListeners returns the addresses of the daemon's web listeners: the
// loopback port and the unix socket's path.
func webListeners(t *testing.T, d *Daemon) (tcp, unix string) {
	t.Helper()
	for _, bl := range d.listeners {
		if bl.door != "web" {
			continue
		}
		switch a := bl.l.Addr(); a.Network() {
		case "tcp":
			tcp = a.String()
		case "unix":
			unix = a.String()
		}
	}
	if tcp == "" || unix == "" {
		t.Fatalf("web listeners: tcp %q, unix %q", tcp, unix)
	}
	return tcp, unix
}

// webClient is an HTTP client that dials network and addr whatever the
// URL says.
func webClient(network, addr string) *http.Client {
	return &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}}
}

// TestWebInetListener: with the web listeners of examples/sluice.toml,
// the loopback port serves /metrics and answers / and /status.json 404,
// naming the setting that allows them; status_on_inet = true serves them
// there too; the unix socket serves everything either way.
func TestWebInetListener(t *testing.T) {
	for _, statusOnInet := range []bool{false, true} {
		t.Run(fmt.Sprintf("status_on_inet=%v", statusOnInet), func(t *testing.T) {
			dir := t.TempDir()
			extra := ""
			if statusOnInet {
				extra = "status_on_inet = true\n"
			}
			d := startDaemon(t, writeConfig(t, dir, webListenersConfig(dir, extra)))
			tcp, unix := webListeners(t, d)
			for _, c := range []struct {
				network, addr string
				page          bool // / and /status.json are served
			}{
				{"tcp", tcp, statusOnInet},
				{"unix", unix, true},
			} {
				client := webClient(c.network, c.addr)
				for _, path := range []string{"/", "/status.json", "/metrics"} {
					resp, err := client.Get("http://sluice" + path)
					if err != nil {
						t.Fatalf("%s GET %s: %v", c.network, path, err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					want := http.StatusOK
					if path != "/metrics" && !c.page {
						want = http.StatusNotFound
					}
					if resp.StatusCode != want {
						t.Errorf("%s GET %s: %s, want %d: %.80q", c.network, path, resp.Status, want, b)
						continue
					}
					if want == http.StatusNotFound && !strings.Contains(string(b), "status_on_inet = true") {
						t.Errorf("%s GET %s: the 404 does not name the setting: %q", c.network, path, b)
					}
				}
				client.CloseIdleConnections()
			}
		})
	}
}

// TestWebDefaultsAgree: config's default web.max_conns is the web
// server's own default.
func TestWebDefaultsAgree(t *testing.T) {
	if got := config.Default().Web.MaxConns; got != web.DefaultMaxConns {
		t.Errorf("web.max_conns: the configuration's default is %d, the server's %d", got, web.DefaultMaxConns)
	}
}

// serverSockets counts the established TCP connections whose local port
// is port and whose descriptor this process holds: the daemon's side of
// its web listener's connections (the test's own side has another local
// port).
func serverSockets(t *testing.T, port int) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	mine := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, "socket:[") {
			mine[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] = true
		}
	}
	n := 0
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "01" { // 01: established
				continue
			}
			_, hexPort, _ := strings.Cut(f[1], ":")
			if p, err := strconv.ParseInt(hexPort, 16, 32); err == nil && int(p) == port && mine[f[9]] {
				n++
			}
		}
	}
	return n
}

// TestWebConnCap: beyond web.max_conns the daemon closes new connections
// to its web server at once, though none of them sends a byte: a flood of
// silent connections leaves it holding max_conns descriptors for the
// door, and the connections it kept still get their answers.
func TestWebConnCap(t *testing.T) {
	const maxConns, flood = 8, 64
	dir := t.TempDir()
	d := startDaemon(t, writeConfig(t, dir, webListenersConfig(dir, fmt.Sprintf("max_conns = %d\nmax_streams = 4\n", maxConns))))
	tcp, _ := webListeners(t, d)
	_, portText, _ := net.SplitHostPort(tcp)
	port, _ := strconv.Atoi(portText)
	dial := func() net.Conn {
		c, err := net.Dial("tcp", tcp)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	var held []net.Conn
	for i := range maxConns {
		held = append(held, dial())
		eventuallyTrue(t, func() bool { return d.web.Conns() == i+1 }, fmt.Sprintf("web connection %d accepted", i+1))
	}
	var extras []net.Conn
	for range flood {
		extras = append(extras, dial())
	}
	// Each extra connection is closed by the daemon: the read ends at
	// EOF (or a reset) with nothing read. Only the test's deadline bounds
	// the wait.
	for i, c := range extras {
		if dl, ok := t.Deadline(); ok {
			c.SetReadDeadline(dl.Add(-5 * time.Second))
		}
		b, err := io.ReadAll(c)
		if err != nil && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "connection reset") {
			t.Fatalf("extra connection %d: %v", i+1, err)
		}
		if len(b) > 0 {
			t.Fatalf("extra connection %d got %q", i+1, b)
		}
		c.Close()
	}
	if n := serverSockets(t, port); n != maxConns {
		t.Errorf("the daemon holds %d connections of its web port after %d silent ones, want %d", n, maxConns+flood, maxConns)
	}
	// The connections kept still work (the server's ReadHeaderTimeout,
	// 5s, is far beyond the milliseconds the steps above take).
	for i, c := range held {
		fmt.Fprintf(c, "GET /metrics HTTP/1.1\r\nHost: sluice\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("held connection %d: %v", i+1, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("held connection %d: GET /metrics %s", i+1, resp.Status)
		}
	}
}

// TestWebPeerCap: one local user (nobody, in a child process) opens as
// many connections to the web's loopback port as the listener holds;
// the default per-peer cap (web.max_conns_per_peer, 16) closes those
// beyond it, and Prometheus's scrape (this process, root), queued behind
// them, is answered. Before the per-peer cap nobody held every place
// and the scrape was closed unanswered.
func TestWebPeerCap(t *testing.T) {
	const maxConns = 2 * web.DefaultMaxConnsPerPeer
	dir := t.TempDir()
	var logs logbuf.Buffer
	d := startDaemonLog(t, writeConfig(t, dir, webListenersConfig(dir, fmt.Sprintf("max_conns = %d\nmax_streams = 4\n", maxConns))), slog.New(slog.NewTextHandler(&logs, nil)))
	tcp, _ := webListeners(t, d)
	h := peercredtest.Hold(t, "nobody", "tcp", tcp, maxConns)
	// nobody's connections are queued ahead of the scrape's, and the
	// listener takes them in order.
	c, err := net.Dial("tcp", tcp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute)) // against a hang only
	fmt.Fprintf(c, "GET /metrics HTTP/1.1\r\nHost: sluice\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the scrape behind nobody's %d connections: %v", maxConns, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "sluice_") {
		t.Fatalf("the scrape: %s\n%.200s", resp.Status, body)
	}
	h.WaitClosed(t, maxConns-web.DefaultMaxConnsPerPeer)
	logs.WaitFor(t, "web: too many connections from one peer", `peer="uid `+strconv.Itoa(h.UID)+`"`, "max_conns_per_peer=16")
}
