package netserve

import "context"

// Drain stops accepting and waits until every connection has ended on
// its own or ctx ends; then it closes the rest, as Close does, and waits
// for their handlers too. Unlike Shutdown it does not close connections
// that are idle between requests: it is for protocols whose connection
// carries a long session (milter: one per SMTP session), where an idle
// connection is not a finished one and closing it fails the peer's
// session.
func (s *Server) Drain(ctx context.Context) error { return s.stop(ctx, false) }

// stop is Shutdown (wakeIdle: close the connections idle between
// requests) or Drain (leave them to end on their own).
func (s *Server) stop(ctx context.Context, wakeIdle bool) error {
	s.closing.Store(true)
	s.stopRunners()
	s.mu.Lock()
	for _, a := range s.listeners {
		a.stop()
	}
	if wakeIdle {
		for c := range s.conns {
			c.wakeIdle()
		}
	}
	s.dropPoller()
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.Close()
		<-done
		return ctx.Err()
	}
}

// Wait blocks until every connection handler has returned, and every
// goroutine that ran one; those wait for further connections until the
// server stops, so Wait returns only after Close, Shutdown or Drain. After
// Close, it is how a caller knows that no handler is left running.
func (s *Server) Wait() { s.wg.Wait() }
