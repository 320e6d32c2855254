package mux

import (
	"context"

	"sluice/internal/pool"
	"sluice/internal/rawio"
)

// Drain is the old multiplexor's side of an upgrade in place
// (docs/mux.md, "Upgrade in place: SIGUSR2"): another process accepts on the same
// listening sockets now. It stops accepting on every listener, leaving
// the sockets open and their connections waiting in the backlog for the
// other process, and waits until every connection accepted before has
// been answered and closed (forwarded requests included), or until ctx
// ends (the error is then ctx's). Close still ends the server and Serve.
func (s *Server) Drain(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.draining.Store(true)
	fronts := make([]*front, 0, len(s.fronts))
	for f := range s.fronts {
		fronts = append(fronts, f)
	}
	s.mu.Unlock()
	for _, f := range fronts {
		f.stopAccepting()
	}
	s.mu.Lock()
	if s.active.Load() == 0 {
		s.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	s.drained = ch
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// closeConn closes an admitted connection.
func (s *Server) closeConn(fd int, privileged bool) {
	rawio.CloseFD(fd)
	s.release(privileged)
}

// release counts an admitted connection closed, and ends Drain's wait
// with the last one.
func (s *Server) release(privileged bool) {
	if !privileged {
		s.mu.Lock()
		s.restricted--
		s.mu.Unlock()
	}
	if s.active.Add(-1) != 0 || !s.draining.Load() {
		return
	}
	s.mu.Lock()
	if s.drained != nil {
		close(s.drained)
		s.drained = nil
	}
	s.mu.Unlock()
}

// stopAccepting closes the front's duplicate of the listening socket, on
// the owner, and returns once it is closed: what it accepted before is
// still served.
func (f *front) stopAccepting() {
	done := make(chan struct{})
	if !f.s.o.Pool.OnOwner(func(*pool.Owner) {
		if !f.stopped && f.lfd >= 0 {
			f.o.Forget(f.lfd)
			f.retry.Stop()
			rawio.CloseFD(f.lfd)
			f.lfd = -1
		}
		close(done)
	}, func() { close(done) }) {
		return
	}
	<-done
}
