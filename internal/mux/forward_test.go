package mux_test

import (
	"io"
	"net"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"sluice/internal/mux"
	"sluice/internal/pool"
)

// TestForwardedOnOwner: a forwarded command read whole at the accept is
// answered on the pool's owner (it writes the worker's reply), status
// from the owner's snapshot and version at once, none by a connection
// goroutine; a request queued
// behind a busy worker when the server closes ends with EOF for its
// client, and the pool's later end of the call does not touch the
// connection again.
func TestForwardedOnOwner(t *testing.T) {
	fs := watchFront(t)
	dir := t.TempDir()
	p, _ := runPool(t, dir)
	srv := mux.New(mux.Options{Pool: p, Timeout: 10 * time.Second})
	sock := filepath.Join(dir, "mx.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	// The first three clients have written their lines before Serve
	// starts, so that Serve finds each whole at the accept.
	reqs := []struct{ req, want string }{
		{"relayok 192.0.2.1 host 25 127.0.0.1 25 Q1\n", `^ok 1 ok 250 2\.1\.0 0\n$`},
		// The worker may still be busy with the relayok.
		{"status\n", `^[IB] 0 1 5 0 0\n$`},
		{"version\n", `^3\.3$`},
	}
	replies := make([]chan string, len(reqs))
	for i, r := range reqs {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, r.req); err != nil {
			t.Fatal(err)
		}
		replies[i] = make(chan string, 1)
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			b, _ := io.ReadAll(c)
			replies[i] <- string(b)
		}()
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln, true) }()
	closed := false
	defer func() {
		if !closed {
			srv.Close()
			<-serveDone
		}
	}()
	for i, r := range reqs {
		if got := <-replies[i]; !regexp.MustCompile(r.want).MatchString(got) {
			t.Fatalf("%q: %q, want %s", r.req, got, r.want)
		}
	}
	if n := fs.count(mux.FrontHandOff); n != 0 {
		t.Fatalf("%d connections handed to connection goroutines, want 0", n)
	}
	// "sleep" is not one of the counted kinds: a connection goroutine
	// forwards it (Do), and it holds the only worker.
	slept := make(chan string, 1)
	go func() { slept <- query(t, sock, "sleep 3000\n", false) }()
	waitPool(t, p, func(s *pool.Snapshot) bool { return s.Count(pool.Busy) == 1 })
	queued := make(chan string, 1)
	go func() { queued <- query(t, sock, "scan Q2 /tmp\n", false) }()
	waitPool(t, p, func(s *pool.Snapshot) bool { return s.Queued == 1 })
	srv.Close()
	closed = true
	if err := <-serveDone; err != mux.ErrServerClosed {
		t.Fatalf("Serve after Close: %v", err)
	}
	if got := <-queued; got != "" {
		t.Fatalf("queued scan at Close: %q, want EOF", got)
	}
	if got := <-slept; got != "" {
		t.Fatalf("sleeping request at Close: %q, want EOF", got)
	}
}

// waitPool waits until cond holds for a snapshot of p.
func waitPool(t *testing.T, p *pool.Pool, cond func(*pool.Snapshot) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		snap, ok := p.Snapshot()
		if ok && cond(&snap) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool never reached the state wanted: %+v", snap)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
