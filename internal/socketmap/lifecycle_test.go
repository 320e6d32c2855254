package socketmap

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"sluice/internal/netserve"
	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/servetest"
)

// startServer serves h on a fresh unix socket; dial connects to it.
func startServer(t *testing.T, h Handler, o Options) (s *Server, served chan error, dial func() (net.Conn, *bufio.Reader)) {
	t.Helper()
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "map.sock"))
	if err != nil {
		t.Fatal(err)
	}
	s = NewServer(h, o)
	served = make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	dial = func() (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("unix", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // against a hang only
		return c, bufio.NewReader(c)
	}
	return s, served, dial
}

func ask(t *testing.T, c net.Conn, r *bufio.Reader, req, want string) {
	t.Helper()
	if _, err := c.Write(AppendNetstring(nil, req)); err != nil {
		t.Fatal(err)
	}
	if got := readReply(t, r); got != want {
		t.Fatalf("%q: %q, want %q", req, got, want)
	}
}

// A Handler that panics costs its own connection only: it is closed, the
// panic is logged, the other connections are still served and new ones
// accepted.
func TestHandlerPanic(t *testing.T) {
	var logs logbuf.Buffer
	h := HandlerFunc(func(ctx context.Context, name, key string) (string, error) {
		if name == "panic" {
			panic("lookup bug")
		}
		return echo(ctx, name, key)
	})
	s, served, dial := startServer(t, h, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	bystander, br := dial()
	ask(t, bystander, br, "m before", "OK m|before")
	victim, vr := dial()
	ask(t, victim, vr, "m hello", "OK m|hello")
	if _, err := victim.Write(AppendNetstring(nil, "panic now")); err != nil {
		t.Fatal(err)
	}
	servetest.ClosedAlone(t, vr, s.Conns, 1)
	logs.WaitFor(t, "socket map: panic serving a connection", "lookup bug")
	ask(t, bystander, br, "m after", "OK m|after")
	late, lr := dial()
	ask(t, late, lr, "m new", "OK m|new")
	s.Close()
	if err := <-served; !errors.Is(err, netserve.ErrServerClosed) {
		t.Errorf("Serve: %v", err)
	}
}

// Shutdown stops accepting, lets a lookup in flight write its reply,
// closes idle connections, and returns once every connection is gone.
// When its context ends first, the lookups in flight are cancelled.
func TestShutdownDrains(t *testing.T) {
	for _, expire := range []bool{false, true} {
		started := make(chan struct{}, 1)
		release := make(chan struct{})
		h := HandlerFunc(func(ctx context.Context, name, key string) (string, error) {
			if name == "block" {
				started <- struct{}{}
				select {
				case <-release:
				case <-ctx.Done():
					return "", ctx.Err()
				}
			}
			return "OK " + key, nil
		})
		s, served, dial := startServer(t, h, Options{Logger: slog.New(slog.DiscardHandler)})
		idle, ir := dial()
		ask(t, idle, ir, "m warm", "OK warm")
		busy, br := dial()
		if _, err := busy.Write(AppendNetstring(nil, "block x")); err != nil {
			t.Fatal(err)
		}
		<-started
		ctx, cancel := context.WithCancel(context.Background())
		shut := make(chan error, 1)
		go func() { shut <- s.Shutdown(ctx) }()
		if err := <-served; !errors.Is(err, netserve.ErrServerClosed) {
			t.Fatalf("Serve: %v", err)
		}
		if _, err := ir.ReadByte(); !errors.Is(err, io.EOF) {
			t.Fatalf("idle connection after Shutdown: %v", err)
		}
		select {
		case err := <-shut:
			t.Fatalf("Shutdown returned %v with a lookup in flight", err)
		default:
		}
		if expire {
			cancel()
			if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
				t.Fatalf("busy connection after the context ended: %v", err)
			}
			if err := <-shut; !errors.Is(err, context.Canceled) {
				t.Fatalf("Shutdown: %v", err)
			}
		} else {
			close(release)
			if got := readReply(t, br); got != "OK x" {
				t.Fatalf("the lookup in flight answered %q", got)
			}
			if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
				t.Fatalf("busy connection after its reply: %v", err)
			}
			if err := <-shut; err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
		}
		cancel()
	}
}

// MaxConns is explicit: past it, new connections are closed at once.
func TestMaxConns(t *testing.T) {
	s, _, dial := startServer(t, echo, Options{MaxConns: 1, Logger: slog.New(slog.DiscardHandler)})
	defer s.Close()
	a, ar := dial()
	ask(t, a, ar, "m a", "OK m|a")
	_, br := dial()
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("connection over MaxConns: %v", err)
	}
	ask(t, a, ar, "m again", "OK m|again")
}
