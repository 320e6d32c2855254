package netserve

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
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
