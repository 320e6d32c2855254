package ban

import (
	"context"
)

// Wait is one sender's wait for a slot of a key, and its send, under the
// guard: begun by Admit, ended by Got and then, for a granted slot,
// Done.
type Wait struct {
	g      *Guard
	id     string
	p      *Policy
	ctx    context.Context
	cancel context.CancelFunc
	stop   func()
	// revoked is closed when the key is suspended (nil: a policy without
	// ban settings whose key was not suspended, watched through the
	// snapshot only).
	revoked <-chan struct{}
}

// Admit decides whether a sender of key id (its policy's ban settings
// p; nil: none) may wait for a slot: a *Deferral when the key is
// suspended, else the Wait whose Context to wait with (it ends when the
// key is suspended meanwhile). A policy without ban settings whose key
// the snapshot of suspended keys does not hold costs no marks call and no
// goroutine.
func (g *Guard) Admit(ctx context.Context, id string, p *Policy) (*Wait, error) {
	w := &Wait{g: g, id: id, p: p}
	if _, ok := lookup(g.susp.Load(), id, g.clock.Now()); p == nil && !ok {
		w.ctx, w.cancel = context.WithCancel(ctx)
		w.stop = g.onSuspend(id, w.cancel)
		return w, nil
	}
	if until, why := g.admit(ctx, id); !until.IsZero() {
		return nil, g.deferral(id, until, why)
	}
	suspended, stop := g.watch(id)
	w.revoked, w.stop = suspended, stop
	w.ctx, w.cancel = context.WithCancel(ctx)
	go func() {
		select {
		case <-suspended:
			w.cancel()
		case <-w.ctx.Done():
		}
	}()
	return w, nil
}

// Context is what the sender waits for its slot with.
func (w *Wait) Context() context.Context { return w.ctx }

// Limit is the key's limit in force for a policy that adapts it (the
// configured one otherwise); 0 without ban settings.
func (w *Wait) Limit(ctx context.Context) int64 {
	if w.p == nil {
		return 0
	}
	return w.g.Limit(ctx, w.id, w.p)
}

// Got ends the wait with what acquiring the slot returned (err; release
// gives a granted slot back unused). It returns what the sender gets: a
// *Deferral when the key was suspended meanwhile (the slot given back),
// else err. A sender that keeps its slot calls Done when it ends.
func (w *Wait) Got(ctx context.Context, err error, release func()) error {
	if w.revoked == nil {
		w.stop()
		defer w.cancel()
		x, suspended := lookup(w.g.susp.Load(), w.id, w.g.clock.Now())
		switch {
		case suspended:
			if err == nil {
				release()
			}
			return w.g.deferral(w.id, x.until, x.reason)
		case err != nil && ctx.Err() == nil && w.ctx.Err() != nil:
			// Cancelled by the suspension, which ended before this look.
			return w.g.deferral(w.id, x.until, x.reason)
		}
		return err
	}
	w.cancel()
	if err != nil {
		w.stop()
		if ctx.Err() == nil && isClosed(w.revoked) {
			return w.g.revoked(w.id)
		}
		return err
	}
	if isClosed(w.revoked) {
		// Suspended while this sender was handed its slot (a slot freed
		// at the ban went to it before the cancel above): it must not send.
		release()
		w.stop()
		return w.g.revoked(w.id)
	}
	return nil
}

// Done ends a granted slot's watch of the key.
func (w *Wait) Done() {
	if w.revoked != nil {
		w.stop()
	}
}

// Revoked is closed when the key is suspended while the sender holds its
// slot (nil: not watched).
func (w *Wait) Revoked() <-chan struct{} { return w.revoked }

// RevokeReason is what a sender whose slot was revoked hears.
func (w *Wait) RevokeReason() string { return w.g.revoked(w.id).Error() }

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
