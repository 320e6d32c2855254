package netserve

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine running: a
// server's runners included, once it is stopped and waited for.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
func runners() int {
	var b strings.Builder
	pprof.Lookup("goroutine").WriteTo(&b, 1)
	_, profile, _ := strings.Cut(b.String(), "\n") // after "goroutine profile: total N"
	n := 0
	for _, block := range strings.Split(profile, "\n\n") {
		if strings.Contains(block, "netserve.(*Server).runner") {
			var k int
			fmt.Sscanf(block, "%d @", &k)
			n += k
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
		waitFor(t, "the runner waits again", func() bool { return s.Conns() == 0 && s.idle.Load() == 1 })
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
	waitFor(t, "the burst accepted", func() bool { return s.Conns() == burst })
	if n := runners(); n != burst {
		t.Fatalf("%d runners for %d connections", n, burst)
	}
	for _, c := range conns {
		c.Close()
	}
	waitFor(t, "the burst served", func() bool { return s.Conns() == 0 && runners() == maxIdleRunners })
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
	waitFor(t, "a runner waiting", func() bool { return s.idle.Load() == 1 })
	s.Close()
	s.Wait()
	if n := runners(); n != 0 {
		t.Fatalf("%d runners after Close and Wait", n)
	}
	busy.Close()
}
