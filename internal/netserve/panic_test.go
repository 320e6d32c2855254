package netserve

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/servetest"
)

// TestHandlerPanic: a handler that panics costs only its own connection:
// it is closed, the panic is logged, the other connections keep being
// served and new ones accepted.
func TestHandlerPanic(t *testing.T) {
	var logs logbuf.Buffer
	s := New(Options{Name: "echo", Logger: slog.New(slog.NewTextHandler(&logs, nil))}, echoLines)
	dial := serveTCP(t, s)
	echo := func(c net.Conn, r *bufio.Reader, msg string) {
		t.Helper()
		if _, err := io.WriteString(c, msg+"\n"); err != nil {
			t.Fatal(err)
		}
		if got, err := r.ReadString('\n'); err != nil || got != msg+"\n" {
			t.Fatalf("echo of %q: %q %v", msg, got, err)
		}
	}
	bystander, br := dial()
	echo(bystander, br, "before")
	victim, vr := dial()
	echo(victim, vr, "hello")
	if _, err := io.WriteString(victim, "panic\n"); err != nil {
		t.Fatal(err)
	}
	servetest.ClosedAlone(t, vr, s.Conns, 1)
	logs.WaitFor(t, "echo: panic serving a connection", "handler bug")
	echo(bystander, br, "after")
	late, lr := dial()
	echo(late, lr, "new")
}

// echoLines is a handler that echoes each line, and panics on the line
// "panic".
func echoLines(c *Conn) {
	sc := bufio.NewScanner(c.Reader())
	for sc.Scan() {
		if sc.Text() == "panic" {
			panic("handler bug")
		}
		if _, err := io.WriteString(c, sc.Text()+"\n"); err != nil {
			return
		}
		c.Done()
	}
}

// serveTCP serves s on a loopback port, and shuts it down at the test's
// end, which must go cleanly; dial connects a client, closed before.
func serveTCP(t *testing.T, s *Server) (dial func() (net.Conn, *bufio.Reader)) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
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
	return func() (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(30 * time.Second)) // against a hang only
		return c, bufio.NewReader(c)
	}
}
