package web

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
)

// slowServeListener is a listener whose Accept, once the daemon has closed
// it, does not return until the second Close: it holds http.Server.Serve
// in its accept loop (the listener still tracked by the server) exactly
// as a Serve goroutine that has not yet been scheduled does, and the
// second Close, the server's own, unblocks it. No wait group is involved,
// so the test cannot deadlock whichever way Shutdown goes.
type slowServeListener struct {
	net.Listener
	accepting chan struct{} // closed at the first Accept
	released  chan struct{} // closed at the second Close
	mu        sync.Mutex
	closes    int
	once      sync.Once
}

func (l *slowServeListener) Accept() (net.Conn, error) {
	l.once.Do(func() { close(l.accepting) })
	<-l.released
	return nil, net.ErrClosed
}

func (l *slowServeListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closes++
	err := l.Listener.Close() // the second one reports net.ErrClosed
	if l.closes == 2 {
		close(l.released)
	}
	return err
}

// TestShutdownAfterListenerClosed: the daemon closes every door's
// listener before it drains the doors; when Serve has not returned by
// then, http.Server's Shutdown closes the same listener again and gets
// "use of closed network connection". That is not a failed shutdown
// (sluice serve exited 1 for it).
func TestShutdownAfterListenerClosed(t *testing.T) {
	s := New(Options{Source: newFakeSource()})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &slowServeListener{Listener: inner, accepting: make(chan struct{}), released: make(chan struct{})}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	<-l.accepting
	if err := l.Close(); err != nil { // the daemon's close
		t.Fatal(err)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown after the listener was closed: %v", err)
	}
	if err := <-served; !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve: %v", err)
	}
	if l.closes != 2 {
		t.Fatalf("the listener was closed %d times, want 2 (the daemon's, the server's)", l.closes)
	}
}
