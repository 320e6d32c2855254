package app

import (
	"context"
	"maps"
	"sync"
	"time"
)

// suspension is a suspended throttle key's end and reason.
type suspension struct {
	until  time.Time
	reason string
}

// suspendSet is a snapshot of the throttle keys with a suspension mark:
// what a policy without ban settings checks, without a marks call, to
// know whether a key needs the ban guard at all. It is replaced whole
// when it changes; changed is cancelled then.
type suspendSet struct {
	ids     map[string]suspension
	changed context.Context
	cancel  context.CancelFunc
}

func newSuspendSet(ids map[string]suspension) *suspendSet {
	s := &suspendSet{ids: ids}
	s.changed, s.cancel = context.WithCancel(context.Background())
	return s
}

// lookup returns id's suspension in force at now.
func (s *suspendSet) lookup(id string, now time.Time) (suspension, bool) {
	x, ok := s.ids[id]
	return x, ok && now.Before(x.until)
}

// suspendedSet is the guard's snapshot of suspended keys.
func (g *banGuard) suspendedSet() *suspendSet { return g.susp.Load() }

// setSuspended records (until after now) or forgets (zero until) id's
// suspension in the snapshot, as this daemon made or ended it.
func (g *banGuard) setSuspended(id string, until time.Time, reason string) {
	g.suspMu.Lock()
	defer g.suspMu.Unlock()
	old := g.susp.Load()
	ids := maps.Clone(old.ids)
	if until.IsZero() {
		delete(ids, id)
	} else {
		ids[id] = suspension{until, reason}
	}
	g.suspGen++
	g.susp.Store(newSuspendSet(ids))
	old.cancel()
}

// refreshSuspended reads the suspension marks into the snapshot: how a
// daemon learns of the suspensions and resumes another daemon made in
// shared marks. A snapshot read while this daemon changed the set is
// dropped (the next refresh reads again), so a suspension or resume
// made here is never undone by an older read.
func (g *banGuard) refreshSuspended(ctx context.Context) error {
	g.suspMu.Lock()
	gen := g.suspGen
	g.suspMu.Unlock()
	list, err := g.marks.List(ctx)
	if err != nil {
		return err
	}
	now := g.now()
	ids := map[string]suspension{}
	for _, m := range list {
		if m.Name == markSuspend && now.Before(m.Expires) {
			ids[m.Key] = suspension{m.Expires, suspendReason(m.Mark)}
		}
	}
	g.suspMu.Lock()
	defer g.suspMu.Unlock()
	old := g.susp.Load()
	if gen != g.suspGen || maps.Equal(ids, old.ids) {
		return nil
	}
	g.susp.Store(newSuspendSet(ids))
	old.cancel()
	return nil
}

// runSuspended refreshes the snapshot every interval until ctx ends.
func (g *banGuard) runSuspended(ctx context.Context, every time.Duration, onErr func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := g.refreshSuspended(ctx); err != nil && ctx.Err() == nil {
				onErr(err)
			}
		}
	}
}

// onSuspend calls f once id joins the snapshot of suspended keys, until
// stop is called: a sender waiting on a key of a policy without ban
// settings is told at once, with no goroutine or marks call of its own.
func (g *banGuard) onSuspend(id string, f func()) (stop func()) {
	var mu sync.Mutex
	stopped := false
	var cur func() bool
	var watch func()
	watch = func() {
		s := g.susp.Load()
		if _, ok := s.lookup(id, g.now()); ok {
			f()
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			cur = context.AfterFunc(s.changed, watch)
		}
	}
	watch()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		if cur != nil {
			cur()
		}
	}
}
