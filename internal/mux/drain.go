package mux

import (
	"context"
	"errors"

	"sluice/internal/pool"
)

// Drain is the old multiplexor's side of an upgrade in place
// (docs/mux.md, "Upgrade in place: SIGUSR2"): another process accepts on the same
// listening sockets now. It stops accepting on every listener, leaving
// the sockets open and their connections waiting in the backlog for the
// other process, and waits until every connection accepted before has
// been answered and closed (forwarded requests included), or until ctx
// ends (the error is then ctx's). Close still ends the server; the
// restricted sockets' Serve returns ErrDraining.
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
	for _, acc := range s.listeners {
		acc.close()
	}
	s.mu.Unlock()
	for _, f := range fronts {
		f.stopAccepting()
	}
	s.accepting.Wait() // no restricted accept loop can admit one more
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

// ErrDraining is returned by Serve on a restricted socket once Drain has
// stopped its accepting.
var ErrDraining = errors.New("mux: draining")

// closeConn closes an admitted connection.
func (s *Server) closeConn(fd int) {
	closeRaw(fd)
	s.release()
}

// release counts an admitted connection closed, and ends Drain's wait
// with the last one.
func (s *Server) release() {
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
			closeRaw(f.lfd)
			f.lfd = -1
		}
		close(done)
	}, func() { close(done) }) {
		return
	}
	<-done
}
