package netserve

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDrain: Drain leaves idle connections open until they end by
// themselves, and closes them when ctx ends.
func TestDrain(t *testing.T) {
	for _, expire := range []bool{false, true} {
		ended := make(chan struct{}, 1)
		s := New(Options{Logger: slog.New(slog.DiscardHandler)}, func(c *Conn) {
			io.Copy(io.Discard, c.Conn) // until the peer or Close ends it
			ended <- struct{}{}
		})
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- s.Serve(l) }()
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); s.Conns() != 1; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("connection not accepted")
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		drained := make(chan error, 1)
		go func() { drained <- s.Drain(ctx) }()
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Fatalf("Serve: %v", err)
		}
		select {
		case err := <-drained:
			t.Fatalf("Drain returned %v with an idle connection open", err)
		case <-ended:
			t.Fatal("Drain closed an idle connection")
		default:
		}
		if expire {
			cancel()
		} else {
			c.Close()
		}
		err = <-drained
		if expire != errors.Is(err, context.Canceled) || (!expire && err != nil) {
			t.Fatalf("Drain (ctx expired %v): %v", expire, err)
		}
		<-ended
		s.Wait()
		c.Close()
		cancel()
	}
}

// TestShutdownServesSentRequest: a request a peer sent before the
// handler took it up, or the first request of a connection accepted just
// before the stop, is answered through a Shutdown, then the connection is
// closed: on a connection whose handler starts only after the stop began
// (the request sent before the stop, or after its wake of the idle
// connections), on one whose handler already waited for its first
// request when the stop woke it ("first late": FirstRequestGrace), and
// on one whose peer sent its next request while the handler was still
// answering the last (the wake set its deadline to now). A connection
// that sent nothing is closed.
func TestShutdownServesSentRequest(t *testing.T) {
	for _, when := range []string{"before", "after the wake", "first late", "while answering"} {
		t.Run(when, func(t *testing.T) {
			start, gate, got := make(chan struct{}), make(chan struct{}), make(chan string, 2)
			s := New(Options{Logger: slog.New(slog.DiscardHandler)}, func(c *Conn) {
				<-start
				br := bufio.NewReader(c.Reader())
				for c.Serving() {
					line, err := br.ReadString('\n')
					c.Done()
					if err != nil {
						return
					}
					got <- line
					<-gate
					if _, err := c.Write([]byte("re " + line)); err != nil {
						return
					}
				}
			})
			l, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
			if err != nil {
				t.Fatal(err)
			}
			served := make(chan error, 1)
			go func() { served <- s.Serve(l) }()
			asks, err := net.Dial("unix", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer asks.Close()
			idle, err := net.Dial("unix", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer idle.Close()
			for deadline := time.Now().Add(10 * time.Second); s.Conns() != 2; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("connections not accepted")
				}
			}
			send := func(line string) {
				if _, err := asks.Write([]byte(line)); err != nil {
					t.Fatal(err)
				}
			}
			want := "re ping\n"
			switch when {
			case "before":
				send("ping\n")
			case "first late":
				close(start) // the handler waits in its read
			case "while answering":
				close(start)
				send("first\n")
				<-got
				want = "re first\nre ping\n"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			shut := make(chan error, 1)
			go func() { shut <- s.Shutdown(ctx) }()
			if err := <-served; !errors.Is(err, ErrServerClosed) {
				t.Fatalf("Serve: %v", err)
			}
			// Serve returns once the shutdown stopped the listeners, under
			// s.mu; taking it once more waits for the shutdown's wake of
			// the idle connections.
			s.mu.Lock()
			stopping := s.closing.Load()
			s.mu.Unlock()
			if !stopping {
				t.Fatal("Serve returned before the shutdown began")
			}
			if when != "before" {
				send("ping\n")
			}
			if when == "before" || when == "after the wake" {
				close(start)
			}
			close(gate)
			asks.SetDeadline(time.Now().Add(10 * time.Second))
			r := bufio.NewReader(asks)
			var answers string
			for range strings.Count(want, "\n") {
				line, err := r.ReadString('\n')
				answers += line
				if err != nil {
					break
				}
			}
			if answers != want {
				t.Errorf("answers %q; want %q", answers, want)
			}
			idle.SetDeadline(time.Now().Add(10 * time.Second))
			if n, err := idle.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("a connection that sent nothing: read %d, %v; want it closed", n, err)
			}
			if err := <-shut; err != nil {
				t.Errorf("Shutdown: %v", err)
			}
			s.Wait()
		})
	}
}
