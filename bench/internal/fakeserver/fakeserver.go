// Package fakeserver serves a listener for the load generators' tests
// (their fake anvil, policy and multiplexor servers): a goroutine per
// connection, and every connection closed, and every goroutine waited
// for, at the end of the test.
package fakeserver

import (
	"net"
	"sync"
	"testing"
)

// Server serves one listener.
type Server struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

// Start serves ln until the end of t: handle is called for each
// connection in its own goroutine, and the connection is closed when
// handle returns or when the test ends (Close, registered with t.Cleanup).
func Start(t testing.TB, ln net.Listener, handle func(net.Conn)) *Server {
	s := &Server{ln: ln, conns: map[net.Conn]struct{}{}}
	s.wg.Go(func() { s.serve(handle) })
	t.Cleanup(s.Close)
	return s
}

// Addr is the listener's address (a socket path for a UNIX listener).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close closes the listener and every open connection, and waits for the
// handlers to return.
func (s *Server) Close() {
	_ = s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Server) serve(handle func(net.Conn)) {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				_ = c.Close()
			}()
			handle(c)
		})
	}
}
