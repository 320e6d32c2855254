package mux_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"sluice/internal/clock"
	"sluice/internal/mux"
	"sluice/internal/pool"
	"sluice/internal/pool/pooltest"
)

// onePool is a pool of one fake worker in dir, with a queue of 5.
func onePool(dir string) pool.Config {
	return pool.Config{
		Program: fakeWorker, Dir: dir, MinWorkers: 1, MaxWorkers: 1, MaxRequests: 500,
		IdleTime: time.Minute, BusyTimeout: 30 * time.Second, CmdTimeout: 10 * time.Second,
		SlewTime: time.Second, QueueSize: 5, QueueTimeout: 30 * time.Second, KillGrace: time.Second,
	}
}

// runPool runs onePool(dir); stop ends it and waits (also at cleanup).
func runPool(t *testing.T, dir string) (p *pool.Pool, stop func()) {
	t.Helper()
	return pooltest.Run(t, onePool(dir))
}

// serveMain serves the main socket of a new server on p, in dir, with the
// request timeout given; closeSrv closes it and checks Serve's return
// (also at cleanup).
func serveMain(t *testing.T, p *pool.Pool, dir string, timeout time.Duration) (sock string, srv *mux.Server, closeSrv func()) {
	t.Helper()
	srv = mux.New(mux.Options{Pool: p, Timeout: timeout})
	sock = filepath.Join(dir, "mx.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln, true) }()
	closed := false
	closeSrv = func() {
		if closed {
			return
		}
		closed = true
		srv.Close()
		if err := <-serveDone; !errors.Is(err, mux.ErrServerClosed) {
			t.Errorf("Serve after Close: %v", err)
		}
	}
	t.Cleanup(closeSrv)
	return sock, srv, closeSrv
}

// dialTimed connects to sock; the connection is closed at cleanup and
// reads give up after 30 s.
func dialTimed(t *testing.T, sock string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	return c
}

// frontSteps records the steps of the front (mux.SetFrontHook) for a
// test to wait for: a test reaches a path of the front by waiting for
// its step, not by sleeping.
type frontSteps struct {
	mu    sync.Mutex
	steps []frontStepAt
	more  chan struct{} // a token after each step (capacity 1)
}

type frontStepAt struct {
	step mux.FrontStep
	d    time.Duration
}

// watchFront records the front's steps until the test ends; call it
// before the pool and the server start.
func watchFront(t *testing.T) *frontSteps {
	fs := &frontSteps{more: make(chan struct{}, 1)}
	mux.SetFrontHook(t, func(step mux.FrontStep, d time.Duration) {
		fs.mu.Lock()
		fs.steps = append(fs.steps, frontStepAt{step, d})
		fs.mu.Unlock()
		select {
		case fs.more <- struct{}{}:
		default:
		}
	})
	return fs
}

// count is how many steps of the kind step have been taken.
func (fs *frontSteps) count(step mux.FrontStep) int {
	return len(fs.of(step))
}

// of returns the back-offs (or zeros) of the steps of the kind step taken
// so far, in order.
func (fs *frontSteps) of(step mux.FrontStep) []time.Duration {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var ds []time.Duration
	for _, s := range fs.steps {
		if s.step == step {
			ds = append(ds, s.d)
		}
	}
	return ds
}

// wait waits until n steps of the kind step have been taken (failing the
// test if that has not happened in 10 s) and returns theirs.
func (fs *frontSteps) wait(t *testing.T, step mux.FrontStep, n int) []time.Duration {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		if ds := fs.of(step); len(ds) >= n {
			return ds[:n]
		}
		select {
		case <-fs.more:
		case <-deadline:
			t.Fatalf("front step %d taken %d times in 10 s, want %d", step, fs.count(step), n)
		}
	}
}

// TestFrontWaitsForLine: a connection whose line comes after the accept
// is read by the pool's owner when it comes; one whose first read brings
// part of a line is answered by a connection goroutine, with the same
// reply.
func TestFrontWaitsForLine(t *testing.T) {
	fs := watchFront(t)
	dir := t.TempDir()
	p, _ := runPool(t, dir)
	sock, _, _ := serveMain(t, p, dir, 10*time.Second)
	const req = "relayok 192.0.2.1 host 25 127.0.0.1 25 Q1\n"
	const want = "ok 1 ok 250 2.1.0 0\n"

	c := dialTimed(t, sock)
	fs.wait(t, mux.FrontAwait, 1) // accepted, nothing read: watched on the owner
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(c); string(b) != want {
		t.Fatalf("line after the accept: %q, want %q", b, want)
	}
	if n := fs.count(mux.FrontHandOff); n != 0 {
		t.Fatalf("connections handed off: %d, want 0", n)
	}

	c = dialTimed(t, sock)
	if _, err := io.WriteString(c, req[:7]); err != nil {
		t.Fatal(err)
	}
	// Read at its accept, or once it became readable: either way the
	// first read brought part of the line, and the owner handed it off.
	fs.wait(t, mux.FrontHandOff, 1)
	if _, err := io.WriteString(c, req[7:]); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(c); string(b) != want {
		t.Fatalf("line in two parts: %q, want %q", b, want)
	}
}

// TestFrontSilentClient: a client that sends nothing within the timeout
// is closed without a reply, and one that sends part of a line and then
// nothing likewise; neither holds the server up.
func TestFrontSilentClient(t *testing.T) {
	dir := t.TempDir()
	p, _ := runPool(t, dir)
	const timeout = 300 * time.Millisecond
	sock, _, _ := serveMain(t, p, dir, timeout)
	for _, sent := range []string{"", "stat"} {
		c := dialTimed(t, sock)
		if _, err := io.WriteString(c, sent); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		b, err := io.ReadAll(c)
		if err != nil || len(b) != 0 {
			t.Fatalf("sent %q and nothing more: %q, %v; want EOF", sent, b, err)
		}
		if d := time.Since(start); d < timeout/2 {
			t.Fatalf("sent %q: closed after %v, before the timeout %v", sent, d, timeout)
		}
	}
	if got := query(t, sock, "version\n", false); got != "3.3" {
		t.Fatalf("version after the silent clients: %q", got)
	}
}

// TestFrontCloseEndsWaiting: Close closes a connection still waiting for
// its line (EOF at once for its client, long before the timeout).
func TestFrontCloseEndsWaiting(t *testing.T) {
	dir := t.TempDir()
	p, _ := runPool(t, dir)
	sock, _, closeSrv := serveMain(t, p, dir, time.Minute)
	c := dialTimed(t, sock)
	if got := query(t, sock, "version\n", false); got != "3.3" { // c is accepted by now
		t.Fatalf("version: %q", got)
	}
	closeSrv()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
		t.Fatalf("waiting client at Close: %q, %v; want EOF", b, err)
	}
}

// TestFrontPoolStopped: when the pool stops before the server, the
// connections waiting on the owner see EOF and Serve returns
// ErrPoolStopped; Close afterwards is harmless.
func TestFrontPoolStopped(t *testing.T) {
	dir := t.TempDir()
	p, stopPool := runPool(t, dir)
	srv := mux.New(mux.Options{Pool: p, Timeout: 10 * time.Second})
	sock := filepath.Join(dir, "mx.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln, true) }()
	if got := query(t, sock, "version\n", false); got != "3.3" {
		t.Fatalf("version: %q", got)
	}
	waiting := dialTimed(t, sock) // waits for its line on the owner
	if got := query(t, sock, "version\n", false); got != "3.3" {
		t.Fatalf("version: %q", got)
	}
	stopPool()
	_ = waiting.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(waiting); err != nil || len(b) != 0 {
		t.Fatalf("client waiting when the pool stopped: %q, %v; want EOF", b, err)
	}
	if err := <-serveDone; !errors.Is(err, mux.ErrPoolStopped) {
		t.Fatalf("Serve after the pool stopped: %v, want ErrPoolStopped", err)
	}
	srv.Close()
}

// TestFrontAcceptBackoff: while accept fails (EMFILE: out of
// descriptors), the owner looks at the listener again after a growing
// back-off (5, 10, 20, 40, 80 ms...), not at once; once accept works
// again, the waiting client is served. The pool runs on a fake clock that
// the test moves by each back-off once the owner has armed it: a failed
// accept retried before its back-off had passed would come at the same
// fake time as the one before.
func TestFrontAcceptBackoff(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var failing atomic.Bool
	var mu sync.Mutex
	var tried []time.Time // the fake time of each failed accept
	failing.Store(true)
	mux.SetFrontAccept(t, func(lfd uintptr) (int, syscall.Errno) {
		if failing.Load() {
			mu.Lock()
			tried = append(tried, clk.Now())
			mu.Unlock()
			return -1, syscall.EMFILE
		}
		r, _, e := syscall.RawSyscall6(syscall.SYS_ACCEPT4, lfd, 0, 0, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0, 0)
		return int(r), e
	})
	fs := watchFront(t)
	dir := t.TempDir()
	cfg := onePool(dir)
	cfg.Clock = clk
	p, _ := pooltest.Run(t, cfg)
	sock, _, _ := serveMain(t, p, dir, 10*time.Second)
	got := make(chan string, 1)
	go func() { got <- query(t, sock, "version\n", false) }()
	want := []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond}
	for k, d := range want {
		if b := fs.wait(t, mux.FrontBackoff, k+1)[k]; b != d {
			t.Fatalf("back-off after failed accept %d: %v, want %v", k+1, b, d)
		}
		if k == len(want)-1 {
			failing.Store(false)
		}
		clk.Advance(d)
	}
	if r := <-got; r != "3.3" {
		t.Fatalf("version after the accepts failed: %q", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(tried) != len(want) {
		t.Fatalf("%d failed accepts, want %d (one per back-off)", len(tried), len(want))
	}
	for k := 1; k < len(tried); k++ {
		if d := tried[k].Sub(tried[k-1]); d != want[k-1] {
			t.Errorf("failed accept %d came %v after the one before, want its back-off %v", k+1, d, want[k-1])
		}
	}
}

// TestFrontCloseBeforePoolRuns: Close returns even when the pool's owner
// has not yet taken the main socket (Serve before Run); the pool, run
// afterwards, closes the listener's duplicate it was handed.
func TestFrontCloseBeforePoolRuns(t *testing.T) {
	fs := watchFront(t)
	dir := t.TempDir()
	p, err := pool.New(onePool(dir))
	if err != nil {
		t.Fatal(err)
	}
	srv := mux.New(mux.Options{Pool: p})
	ln, err := net.Listen("unix", filepath.Join(dir, "mx.sock"))
	if err != nil {
		t.Fatal(err)
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln, true) }()
	fs.wait(t, mux.FrontAsked, 1) // Serve waits for the owner
	closed := make(chan struct{})
	go func() { srv.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close blocked while the pool was not running")
	}
	if err := <-serveDone; !errors.Is(err, mux.ErrServerClosed) {
		t.Fatalf("Serve after Close: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- p.Run(ctx) }()
	cancel()
	if err := <-runDone; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestFrontCloseRacesStart: a Close that comes while the owner takes the
// main socket still ends its serving: the socket stops listening (every
// duplicate of it closed) soon after Close, whichever came first.
func TestFrontCloseRacesStart(t *testing.T) {
	dir := t.TempDir()
	p, _ := runPool(t, dir)
	for i := range 1000 {
		srv := mux.New(mux.Options{Pool: p})
		sock := filepath.Join(dir, fmt.Sprintf("mx%d.sock", i))
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		// The path stays: a connect then reaches the socket as long as
		// any duplicate of it is open.
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		serveDone := make(chan error, 1)
		go func() { serveDone <- srv.Serve(ln, true) }()
		if i%2 == 1 {
			runtime.Gosched()
		}
		srv.Close()
		<-serveDone
		deadline := time.Now().Add(5 * time.Second)
		for {
			c, err := net.Dial("unix", sock)
			if err != nil {
				break
			}
			c.Close()
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the socket still listens 5 s after Close", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// TestRestrictedAtMost20: the restricted socket, served on the owner like
// the main one, holds at most 20 connections at once: a 21st is closed
// without a reply while 20 wait for their lines, and once one of them
// has gone, a new connection is answered again.
func TestRestrictedAtMost20(t *testing.T) {
	fs := watchFront(t)
	dir := t.TempDir()
	p, _ := runPool(t, dir)
	srv := mux.New(mux.Options{Pool: p, Timeout: 30 * time.Second})
	sock := filepath.Join(dir, "ro.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln, false) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-serveDone; !errors.Is(err, mux.ErrServerClosed) {
			t.Errorf("Serve after Close: %v", err)
		}
	})
	// ask sends req on a new connection and returns the reply ("" when
	// the connection is closed without one).
	ask := func(req string) string {
		c := dialTimed(t, sock)
		defer c.Close()
		if _, err := io.WriteString(c, req); err != nil {
			return ""
		}
		b, _ := io.ReadAll(c)
		return string(b)
	}
	if got := ask("version\n"); got != "3.3" {
		t.Fatalf("version: %q", got)
	}
	if got := ask("scan Q1 /tmp\n"); got != mux.ReplyPrivileged {
		t.Fatalf("scan on the restricted socket: %q, want %q", got, mux.ReplyPrivileged)
	}
	awaits := fs.count(mux.FrontAwait) // the requests above may have come after their accepts
	var quiet []net.Conn
	for range 20 {
		quiet = append(quiet, dialTimed(t, sock))
	}
	fs.wait(t, mux.FrontAwait, awaits+20)
	if got := ask("version\n"); got != "" {
		t.Fatalf("a 21st connection: %q, want none", got)
	}
	quiet[0].Close()
	deadline := time.Now().Add(10 * time.Second)
	for ask("version\n") != "3.3" {
		if time.Now().After(deadline) {
			t.Fatal("no connection answered in 10 s after one of the 20 went")
		}
	}
}
