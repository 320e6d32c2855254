package netserve

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine running: a
// server's runners included, once it is stopped and waited for. Started
// by TestRawWaitsOnOneProcessor as its child, it serves instead.
func TestMain(m *testing.M) {
	if path := os.Getenv(rawChildEnv); path != "" {
		rawChild(path)
		return
	}
	goleak.VerifyTestMain(m)
}

// goroutineID is the calling goroutine's number, from its stack's header.
func goroutineID() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	return string(bytes.Fields(b)[1])
}

// waitFor polls cond until it holds, failing after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
	}
}

// runners counts the goroutines in Server.runner.
func runners() int { return countRunners(false) }

// waitingRunners counts the runners parked for a connection (in the
// select, not serving one).
func waitingRunners() int { return countRunners(true) }

func countRunners(waiting bool) int {
	var b strings.Builder
	pprof.Lookup("goroutine").WriteTo(&b, 2) // a block per goroutine, its state in the header
	n := 0
	for _, g := range strings.Split(b.String(), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if !strings.Contains(g, "netserve.(*Server).runner(") {
			continue
		}
		if !waiting || strings.Contains(header, "[select") && !strings.Contains(g, "netserve.(*Conn).run(") {
			n++
		}
	}
	return n
}

// TestRunnerReused: a connection that arrives while a runner waits is
// served on that runner's goroutine, not a new one.
func TestRunnerReused(t *testing.T) {
	ids := make(chan string, 1)
	s := New(Options{Logger: slog.New(slog.DiscardHandler)}, func(c *Conn) {
		ids <- goroutineID()
		io.Copy(io.Discard, c.Reader())
	})
	dial := serveTCP(t, s)
	var first string
	for i := range 5 {
		c, _ := dial()
		id := <-ids
		if i == 0 {
			first = id
		} else if id != first {
			t.Fatalf("connection %d served on goroutine %s, the first on %s", i, id, first)
		}
		c.Close()
		waitFor(t, "the runner waits again", func() bool { return s.Conns() == 0 && waitingRunners() == 1 })
	}
}

// TestIdleRunnersCapped: after a burst, at most maxIdleRunners goroutines
// stay to wait for connections; the next connection takes one of them.
func TestIdleRunnersCapped(t *testing.T) {
	s := New(Options{Logger: slog.New(slog.DiscardHandler)}, func(c *Conn) { io.Copy(io.Discard, c.Reader()) })
	dial := serveTCP(t, s)
	const burst = 3 * maxIdleRunners
	var conns []net.Conn
	for range burst {
		c, _ := dial()
		conns = append(conns, c)
	}
	waitFor(t, "a runner for each connection of the burst", func() bool { return s.Conns() == burst && runners() == burst })
	for _, c := range conns {
		c.Close()
	}
	waitFor(t, "the burst served", func() bool {
		return s.Conns() == 0 && waitingRunners() == maxIdleRunners && runners() == maxIdleRunners
	})
	if n := s.idle.Load(); n != maxIdleRunners {
		t.Fatalf("idle runners %d, want %d", n, maxIdleRunners)
	}
	dial()
	waitFor(t, "a runner taken", func() bool { return s.Conns() == 1 && s.idle.Load() == maxIdleRunners-1 })
	if n := runners(); n != maxIdleRunners {
		t.Fatalf("%d runners after one more connection, want %d", n, maxIdleRunners)
	}
}

// TestRunnersStop: Close and Wait leave no runner behind, waiting or
// serving.
func TestRunnersStop(t *testing.T) {
	s := New(Options{Logger: slog.New(slog.DiscardHandler)}, func(c *Conn) { io.Copy(io.Discard, c.Reader()) })
	dial := serveTCP(t, s)
	idle, _ := dial()
	busy, _ := dial()
	waitFor(t, "two connections", func() bool { return s.Conns() == 2 })
	idle.Close()
	waitFor(t, "a runner waiting", func() bool { return waitingRunners() == 1 })
	s.Close()
	s.Wait()
	// Wait returns at the runners' wg.Done, which they run on their way out.
	waitFor(t, "no runner left after Close and Wait", func() bool { return runners() == 0 })
	busy.Close()
}

// A listener its owner closes, not through the Server, leaves the set
// without an event: the parked accept looks again within listenerCheck
// (its check timer wakes it), and Serve returns the listener's error.
// The server still stops cleanly after.
func TestServeEndsWhenOwnerClosesListener(t *testing.T) {
	s := New(Options{Logger: slog.New(slog.DiscardHandler)}, func(c *Conn) { io.Copy(io.Discard, c.Reader()) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	c, err := net.Dial("tcp", l.Addr().String()) // the accept has run and parked since
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "the connection served", func() bool { return s.Conns() == 1 })
	l.Close()
	select {
	case err := <-served:
		if err == nil || errors.Is(err, ErrServerClosed) {
			t.Fatalf("Serve after its owner closed the listener: %v, want the listener's error", err)
		}
	case <-time.After(30 * listenerCheck): // a hang detector, not a measure
		t.Fatal("Serve did not notice that its listener was closed")
	}
	s.Close()
	s.Wait()
}
