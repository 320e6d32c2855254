package netserve

import (
	"bufio"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// leadServer serves a line echo on a unix socket: "block" makes the
// handler say so on blocked and wait (outside the set) until unblock is
// closed. It publishes each connection's fdConn.
func leadServer(t *testing.T) (s *Server, dial func() (net.Conn, *bufio.Reader, *fdConn), blocked <-chan struct{}, unblock chan struct{}) {
	t.Helper()
	unblock = make(chan struct{})
	blockedc := make(chan struct{}, 4)
	conns := make(chan *fdConn, 16)
	s = New(Options{Name: "lead", Logger: slog.New(slog.DiscardHandler)}, func(c *Conn) {
		conns <- c.Conn.(*fdConn)
		r := bufio.NewReader(c.Reader())
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if line == "block\n" {
				blockedc <- struct{}{}
				<-unblock
			}
			if _, err := c.Write([]byte(line)); err != nil {
				return
			}
			c.Done()
		}
	})
	path := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	t.Cleanup(func() {
		select {
		case <-unblock:
		default:
			close(unblock)
		}
		s.Close()
		<-served
		s.Wait()
	})
	dial = func() (net.Conn, *bufio.Reader, *fdConn) {
		t.Helper()
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.SetDeadline(time.Now().Add(30 * time.Second)) // against a hang only
		select {
		case fc := <-conns:
			return c, bufio.NewReader(c), fc
		case <-time.After(30 * time.Second):
			t.Fatal("connection not served")
		}
		return nil, nil, nil
	}
	return s, dial, blockedc, unblock
}

// echo sends line and fails the test unless it comes back.
func echo(t *testing.T, c net.Conn, r *bufio.Reader, line string) {
	t.Helper()
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	got, err := r.ReadString('\n')
	if err != nil || got != line+"\n" {
		t.Fatalf("echo of %q: %q %v", line, got, err)
	}
}

// With one session, its goroutine waits on the set itself between
// requests (no other goroutine is woken for its events), and once the
// session ended, the runner that served it waits on the set for the next
// connection, which it then serves.
func TestSessionLeadsTheSet(t *testing.T) {
	s, dial, _, _ := leadServer(t)
	for i := range 3 {
		c, r, fc := dial()
		for _, line := range []string{"one", "two"} {
			echo(t, c, r, line)
			waitFor(t, "the session's read leads the set", func() bool { return fc.rd.w.leading.Load() })
		}
		c.Close()
		waitFor(t, "the idle runner leads the set", func() bool {
			s.rmu.Lock()
			defer s.rmu.Unlock()
			return len(s.idleRunners) == 1 && s.idleRunners[0].w.leading.Load()
		})
		if n := runners(); n != 1 {
			t.Fatalf("connection %d: %d runners, want 1", i, n)
		}
	}
}

// until echoes line on c until cond holds once its read has parked again
// (the lead may sit elsewhere for a moment: the next exchange moves it).
func until(t *testing.T, what string, c net.Conn, r *bufio.Reader, fc *fdConn, cond func() bool) {
	t.Helper()
	for range 1000 {
		echo(t, c, r, "poke")
		waitFor(t, "the read parks", func() bool { return fc.rd.parked.Load() })
		if cond() {
			return
		}
	}
	t.Fatalf("never: %s", what)
}

// setWatchdog makes d the watchdog's delay from its next arming on, and
// disarms it.
func setWatchdog(p *poller, d time.Duration) {
	p.wdDelay.Store(int64(d))
	if p.watchdog.Stop() {
		p.wdArmed.Store(false)
	}
}

// A leader whose own request takes it elsewhere (here: a handler that
// waits on something else than the set) leaves the lead: to the standby
// at once while another session's read follows, so that session is still
// answered; and, when nothing follows, to the standby after the
// watchdog, so a new connection is still accepted and served.
func TestLeaderBusyElsewhere(t *testing.T) {
	for i := range 5 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			s, dial, blocked, unblock := leadServer(t)
			a, ar, fa := dial()
			// The handing on while b follows must not wait for the watchdog.
			setWatchdog(s.poll, time.Hour)
			until(t, "a's read leads", a, ar, fa, func() bool { return fa.rd.w.leading.Load() })
			b, br, fb := dial()
			until(t, "b's read follows a's", b, br, fb, func() bool {
				// Following with no wake pending: parked until a wakes it.
				return fa.rd.w.leading.Load() && fb.rd.w.following.Load() && len(fb.rd.w.ch) == 0
			})
			if _, err := a.Write([]byte("block\n")); err != nil {
				t.Fatal(err)
			}
			<-blocked
			echo(t, b, br, "b") // b followed: the lead went on
			// Nothing follows b: its release arms the watchdog, and a new
			// connection waits for it.
			setWatchdog(s.poll, leadWatchdog)
			if _, err := b.Write([]byte("block\n")); err != nil {
				t.Fatal(err)
			}
			<-blocked
			c, cr, _ := dial()
			echo(t, c, cr, "c")
			close(unblock)
			for _, r := range []*bufio.Reader{ar, br} {
				if got, err := r.ReadString('\n'); err != nil || got != "block\n" {
					t.Fatalf("blocked request answered %q %v", got, err)
				}
			}
		})
	}
}
