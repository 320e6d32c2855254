package web

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sluice/internal/clock"
	"sluice/internal/testutil/logbuf"
)

// serveOn starts s on a new listener of network ("tcp" on loopback or
// "unix" in a temporary directory) and stops it when the test ends. It
// returns the listener's address and a client that dials it.
func serveOn(t *testing.T, s *Server, network string) (string, *http.Client) {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "web")
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	addr = l.Addr().String()
	tr := &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return addr, &http.Client{Transport: tr}
}

// TestStatusPageByListener: a TCP listener serves /metrics only, and
// answers every other path 404 with a body naming the setting, unless
// StatusOnTCP; a unix socket listener serves everything.
func TestStatusPageByListener(t *testing.T) {
	const setting = "[web] status_on_inet = true"
	paths := []string{"/", "/status.json", "/events", "/app.js", "/favicon.svg", "/metrics", "/nothing"}
	for _, c := range []struct {
		network     string
		statusOnTCP bool
		served      bool // the status page's paths answer 200
	}{
		{"tcp", false, false},
		{"tcp", true, true},
		{"unix", false, true},
		{"unix", true, true},
	} {
		t.Run(fmt.Sprintf("%s/status_on_tcp=%v", c.network, c.statusOnTCP), func(t *testing.T) {
			s := New(Options{Source: newFakeSource(), Clock: clock.NewFake(t0), Gatherer: prometheus.NewRegistry(),
				StatusOnTCP: c.statusOnTCP, StatusSetting: setting})
			_, client := serveOn(t, s, c.network)
			for _, p := range paths {
				method := http.MethodGet
				if p == "/events" {
					method = http.MethodHead // the headers, not the stream
				}
				resp, body := get(t, client, method, "http://web"+p)
				want := http.StatusOK
				switch {
				case p == "/nothing":
					want = http.StatusNotFound
				case p != "/metrics" && !c.served:
					want = http.StatusNotFound
				}
				if resp.StatusCode != want {
					t.Errorf("%s %s: %s, want %d", method, p, resp.Status, want)
				}
				if resp.Header.Get("Content-Security-Policy") != csp {
					t.Errorf("%s %s: no security headers: %v", method, p, resp.Header)
				}
				hidden := want == http.StatusNotFound && !c.served && method == http.MethodGet
				if hidden && (!strings.Contains(body, "not served on TCP listeners") || !strings.Contains(body, setting)) {
					t.Errorf("%s %s: body %.80q does not say why nor name %s", method, p, body, setting)
				}
			}
			// Read-only on every listener.
			resp, _ := get(t, client, http.MethodPost, "http://web/metrics")
			if resp.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("POST /metrics: %s", resp.Status)
			}
		})
	}
}

// TestTCPListenerWithoutMetrics: with no Gatherer a TCP listener serves
// nothing: /metrics is a plain 404, not the status page's explanation.
func TestTCPListenerWithoutMetrics(t *testing.T) {
	s := New(Options{Source: newFakeSource(), Clock: clock.NewFake(t0)})
	_, client := serveOn(t, s, "tcp")
	resp, body := get(t, client, http.MethodGet, "http://web/metrics")
	if resp.StatusCode != http.StatusNotFound || strings.Contains(body, "status page") {
		t.Errorf("GET /metrics without a Gatherer: %s %q", resp.Status, body)
	}
	if resp, _ := get(t, client, http.MethodGet, "http://web/status.json"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /status.json: %s", resp.Status)
	}
}

// dialSilent opens a connection that sends nothing.
func dialSilent(t *testing.T, network, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readToEOF reads c until the server closes it, and fails the test if
// the server sent anything or the read ended otherwise. Only the test's
// own deadline bounds the wait.
func readToEOF(t *testing.T, c net.Conn) {
	t.Helper()
	if dl, ok := t.Deadline(); ok {
		c.SetReadDeadline(dl.Add(-time.Second))
	}
	b, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		t.Fatalf("reading a refused connection: %v", err)
	}
	if len(b) > 0 {
		t.Fatalf("a refused connection got %q", b)
	}
}

func isReset(err error) bool { return strings.Contains(err.Error(), "connection reset") }

// getOn sends GET path on an open connection and returns the status.
func getOn(t *testing.T, c net.Conn, path string) int {
	t.Helper()
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: web\r\n\r\n", path); err != nil {
		t.Fatalf("GET %s on a held connection: %v", path, err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s on a held connection: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestConnCap: each listener holds at most MaxConns connections, even
// silent ones; beyond it a new connection is closed at once (read: EOF),
// logged at the 1st, 2nd, 4th... refusal, while the held ones still
// work. A flood on the TCP listener leaves the unix socket's places
// alone (its mode decides who gets in), and a closed connection gives
// its place back.
func TestConnCap(t *testing.T) {
	const maxConns, extra = 4, 5
	logs := &logbuf.Buffer{}
	s := New(Options{Source: newFakeSource(), Clock: clock.NewFake(t0), Gatherer: prometheus.NewRegistry(),
		MaxConns: maxConns, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	s.srv.ReadHeaderTimeout, s.srv.ReadTimeout, s.srv.IdleTimeout = 0, 0, 0
	tcpAddr, _ := serveOn(t, s, "tcp")
	unixAddr, _ := serveOn(t, s, "unix")

	var held []net.Conn
	for i := range maxConns {
		held = append(held, dialSilent(t, "tcp", tcpAddr))
		waitFor(t, fmt.Sprintf("connection %d counted", i+1), func() bool { return s.Conns() == i+1 })
	}
	var extras []net.Conn
	for range extra {
		extras = append(extras, dialSilent(t, "tcp", tcpAddr))
	}
	waitFor(t, "every extra connection refused", func() bool { return s.Conns()+int(s.refused.Load()) >= maxConns+extra })
	if n, r := s.Conns(), s.refused.Load(); n != maxConns || r != extra {
		t.Fatalf("%d connections open and %d refused, want %d and %d", n, r, maxConns, extra)
	}
	for _, c := range extras {
		readToEOF(t, c)
	}
	if got := len(logs.Lines("web: too many connections")); got != 3 {
		t.Errorf("%d refusal log lines for %d refusals, want 3 (at 1, 2, 4):\n%s", got, extra, logs)
	}
	// The unix socket still has all its places while TCP is full.
	var onUnix []net.Conn
	for i := range maxConns {
		onUnix = append(onUnix, dialSilent(t, "unix", unixAddr))
		waitFor(t, fmt.Sprintf("unix connection %d counted", i+1), func() bool { return s.Conns() == maxConns+i+1 })
	}
	for i, c := range onUnix {
		if code := getOn(t, c, "/status.json"); code != http.StatusOK {
			t.Errorf("unix connection %d while TCP is full: GET /status.json %d", i+1, code)
		}
	}
	for i, c := range held {
		if code := getOn(t, c, "/metrics"); code != http.StatusOK {
			t.Errorf("held TCP connection %d: GET /metrics %d", i+1, code)
		}
	}
	// A closed connection gives its place back, on its own listener.
	held[0].Close()
	waitFor(t, "the closed connection's place", func() bool { return s.Conns() == 2*maxConns-1 })
	c := dialSilent(t, "tcp", tcpAddr)
	if code := getOn(t, c, "/metrics"); code != http.StatusOK {
		t.Errorf("a connection after one closed: GET /metrics %d", code)
	}
	if n := s.Conns(); n != 2*maxConns {
		t.Errorf("%d connections counted, want %d", n, 2*maxConns)
	}
	s.Close()
	waitFor(t, "every place given back after Close", func() bool { return s.Conns() == 0 })
}

// TestDefaultConnCap: a Server without MaxConns has DefaultMaxConns.
func TestDefaultConnCap(t *testing.T) {
	if s := New(Options{Source: newFakeSource()}); s.o.MaxConns != DefaultMaxConns {
		t.Errorf("MaxConns %d, want %d", s.o.MaxConns, DefaultMaxConns)
	}
}

// TestServerTimeoutsBoundSilentConns: a connection that never sends a
// request, or sends one and then idles, does not hold its place for ever.
func TestServerTimeoutsBoundSilentConns(t *testing.T) {
	s := New(Options{Source: newFakeSource()})
	if s.srv.ReadHeaderTimeout <= 0 || s.srv.IdleTimeout <= 0 {
		t.Errorf("ReadHeaderTimeout %v, IdleTimeout %v: silent connections stay for ever", s.srv.ReadHeaderTimeout, s.srv.IdleTimeout)
	}
}
