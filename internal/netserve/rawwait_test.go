package netserve

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"

	"sluice/internal/rawio"
)

// The waiter's raw waits (poller.wait, busy.go): taken while every
// goroutine of netserve's waits in netserve, never while one waits
// elsewhere, never beside another epoll set.

// setOf returns the server's set once Serve has taken it.
func setOf(t *testing.T, s *Server) *poller {
	t.Helper()
	var p *poller
	waitFor(t, "Serve to take the set", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		p = s.poll
		return p != nil
	})
	return p
}

// releaser returns a function that closes release once; it runs before
// the server's shutdown too (registered after serveTCP), so that a failed
// test does not leave a handler waiting for it.
func releaser(t *testing.T, release chan struct{}) func() {
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	return free
}

// exchange sends n lines on c and reads each one's echo.
func exchange(t *testing.T, c net.Conn, r *bufio.Reader, n int) { exchangeAfter(t, c, r, n, nil) }

// quietExchange is exchange with each request sent once every goroutine
// of netserve's waits in netserve again (the handler may still be on its
// way back when its reply has arrived).
func quietExchange(t *testing.T, p *poller, c net.Conn, r *bufio.Reader, n int) {
	t.Helper()
	exchangeAfter(t, c, r, n, func() {
		waitFor(t, "every goroutine back in netserve", func() bool { return p.busy.Load() == 0 })
	})
}

func exchangeAfter(t *testing.T, c net.Conn, r *bufio.Reader, n int, before func()) {
	t.Helper()
	for range n {
		if before != nil {
			before()
		}
		if _, err := io.WriteString(c, "ping\n"); err != nil {
			t.Fatal(err)
		}
		if l, err := r.ReadString('\n'); err != nil || l != "ping\n" {
			t.Fatalf("echo: %q, %v", l, err)
		}
	}
}

// blockingEcho echoes lines; on the line "block" it first waits for
// release, outside netserve (a store on the network, a queue's slot).
func blockingEcho(release <-chan struct{}, blocked chan<- struct{}) func(*Conn) {
	return func(c *Conn) {
		sc := bufio.NewScanner(c.Reader())
		for sc.Scan() {
			if sc.Text() == "block" {
				blocked <- struct{}{}
				<-release
			}
			if _, err := io.WriteString(c, sc.Text()+"\n"); err != nil {
				return
			}
			c.Done()
		}
	}
}

func TestWaiterWaitsRawWhileAllWaitInNetserve(t *testing.T) {
	s := New(Options{Name: "echo", Logger: slog.New(slog.DiscardHandler)}, echoLines)
	dial := serveTCP(t, s)
	p := setOf(t, s)
	c, r := dial()
	exchange(t, c, r, 1)
	before := p.rawWaits.Load()
	quietExchange(t, p, c, r, 20)
	if got := p.rawWaits.Load() - before; got == 0 {
		t.Fatal("20 requests, every goroutine waiting in netserve between them: no raw wait took an event")
	}
	waitFor(t, "every goroutine back in netserve", func() bool { return p.busy.Load() == 0 })
}

func TestWaiterParksWhileAHandlerWaitsElsewhere(t *testing.T) {
	release, blocked := make(chan struct{}), make(chan struct{})
	s := New(Options{Name: "echo", Logger: slog.New(slog.DiscardHandler)}, blockingEcho(release, blocked))
	dial := serveTCP(t, s)
	free := releaser(t, release)
	p := setOf(t, s)
	held, hr := dial()
	other, or := dial()
	exchange(t, other, or, 1)
	if _, err := io.WriteString(held, "block\n"); err != nil {
		t.Fatal(err)
	}
	<-blocked
	waitFor(t, "one goroutine busy: the handler waiting outside netserve", func() bool { return p.busy.Load() == 1 })
	before := p.rawWaits.Load()
	exchange(t, other, or, 20)
	if got := p.rawWaits.Load() - before; got != 0 {
		t.Fatalf("%d raw waits while a handler waited outside netserve: it could not run until one ended", got)
	}
	free()
	if l, err := hr.ReadString('\n'); err != nil || l != "block\n" {
		t.Fatalf("held echo: %q, %v", l, err)
	}
	before = p.rawWaits.Load()
	quietExchange(t, p, other, or, 20)
	if p.rawWaits.Load() == before {
		t.Fatal("no raw wait once the handler was back in netserve")
	}
}

// A handler that reads in a goroutine started with Conn.Go while it waits
// elsewhere is busy: the reader's wait in netserve does not cancel it out.
func TestConnGoCountsItsGoroutine(t *testing.T) {
	release := make(chan struct{})
	reading := make(chan *fdConn, 1)
	s := New(Options{Name: "split", Logger: slog.New(slog.DiscardHandler)}, func(c *Conn) {
		done := make(chan struct{})
		c.Go(func() {
			defer close(done)
			reading <- c.Conn.(*fdConn)
			var b [16]byte
			c.Read(b[:]) // parks: the client sends nothing
		})
		<-release // waits outside netserve
		c.Close()
		<-done
	})
	dial := serveTCP(t, s)
	free := releaser(t, release)
	p := setOf(t, s)
	dial()
	fc := <-reading
	waitFor(t, "the reader parked in netserve", fc.rd.slot.waiting.Load)
	waitFor(t, "the accept loop parked", func() bool { return p.busy.Load() <= 1 })
	if n := p.busy.Load(); n != 1 {
		t.Fatalf("busy = %d: the handler waits outside netserve and its reader in it, want 1", n)
	}
	free()
	waitFor(t, "every goroutine back in netserve", func() bool { return p.busy.Load() == 0 })
}

func TestNoRawWaitBesideAnotherSet(t *testing.T) {
	s := New(Options{Name: "echo", Logger: slog.New(slog.DiscardHandler)}, echoLines)
	dial := serveTCP(t, s)
	p := setOf(t, s)
	c, r := dial()
	other, err := rawio.NewEpoll("other")
	if err != nil {
		t.Fatal(err)
	}
	exchange(t, c, r, 1)
	waitFor(t, "every goroutine back in netserve", func() bool { return p.busy.Load() == 0 })
	before := p.rawWaits.Load()
	exchange(t, c, r, 20)
	if got := p.rawWaits.Load() - before; got != 0 {
		t.Fatalf("%d raw waits beside another epoll set, which the runtime's poller watches", got)
	}
	other.Close()
	before = p.rawWaits.Load()
	quietExchange(t, p, c, r, 20)
	if p.rawWaits.Load() == before {
		t.Fatal("no raw wait once the other set was closed")
	}
}
