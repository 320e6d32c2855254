package mux_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/internal/mux"
	"sluice/internal/netserve"
	"sluice/internal/testutil/logbuf"
)

// A panic serving one listener costs that listener only: it is closed and
// its slot freed, the panic is logged, the other listeners keep getting
// their messages.
func TestNotifierPanic(t *testing.T) {
	var logs logbuf.Buffer
	n := mux.NewNotifier(slog.New(slog.NewTextHandler(&logs, nil)), 10*time.Second)
	n.SetOnSubscribe(func(line []byte) {
		if string(line) == "?boom" {
			panic("subscribe bug")
		}
	})
	path := serveNotifier(t, n)
	bystander := dialNotifier(t, path)
	bystander.line(t)
	_, _ = bystander.c.Write([]byte("?*\n"))
	notifyUntil(t, n, bystander, "R")
	victim := dialNotifier(t, path)
	victim.line(t)
	_, _ = victim.c.Write([]byte("?boom\n"))
	_ = victim.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if l, err := victim.r.ReadString('\n'); !errors.Is(err, io.EOF) {
		t.Fatalf("after the panic the listener is still open: read %q %v", l, err)
	}
	// The listener is closed while the panic unwinds, before it is logged.
	logs.WaitFor(t, "notification socket: panic serving a connection", "subscribe bug")
	n.Notify("F 7")
	for l := bystander.line(t); l != "F 7\n"; l = bystander.line(t) {
		if l != "R\n" { // late copies of notifyUntil's message
			t.Fatalf("bystander got %q", l)
		}
	}
	// All five slots are free for others again.
	for i := range 4 {
		if l := dialNotifier(t, path).line(t); l != "*OK\n" {
			t.Fatalf("listener %d after the panic: %q", i, l)
		}
	}
}

// pipeListener hands out the server ends of net.Pipe connections: a
// write to one blocks until the client reads it, so a test knows a
// message is still being written.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *pipeListener) Addr() net.Addr { return &net.UnixAddr{Name: "pipe", Net: "unix"} }

// dial connects a client to l.
func (l *pipeListener) dial(t *testing.T) *client {
	t.Helper()
	c, s := net.Pipe()
	t.Cleanup(func() { c.Close() })
	select {
	case l.conns <- s:
	case <-l.done:
		t.Fatal("listener closed")
	}
	return &client{c, bufio.NewReader(c)}
}

// Shutdown stops accepting, writes what each listener has pending, then
// closes it; it returns once every listener is gone. The listener here
// reads nothing until Shutdown has begun, so the messages are still being
// written when it does.
func TestNotifierShutdownDrains(t *testing.T) {
	n := mux.NewNotifier(slog.New(slog.DiscardHandler), 10*time.Second)
	ln := newPipeListener()
	served := make(chan error, 1)
	go func() { served <- n.Serve(ln) }()
	defer n.Close()
	a := ln.dial(t)
	if l := a.line(t); l != "*OK\n" {
		t.Fatalf("banner %q", l)
	}
	_, _ = a.c.Write([]byte("?*\n"))
	notifyUntil(t, n, a, "R")
	// Drain late copies of R: once "Z" is read, the writer is idle.
	for n.Notify("Z"); a.line(t) != "Z\n"; {
	}
	n.Notify("F 1") // the writer blocks on it: nobody reads
	n.Notify("F 2") // pending behind it
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- n.Shutdown(ctx) }()
	if err := <-served; !errors.Is(err, netserve.ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
	n.Notify("F late") // after Shutdown began: not sent
	var got []string
	for {
		_ = a.c.SetReadDeadline(time.Now().Add(30 * time.Second))
		l, err := a.r.ReadString('\n')
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		got = append(got, l)
	}
	if strings.Join(got, "") != "F 1\nF 2\n" {
		t.Fatalf("after Shutdown the listener got %q, want F 1 and F 2 then EOF", got)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}
