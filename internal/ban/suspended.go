package ban

import (
	"context"
	"fmt"
	"time"

	"sluice/internal/limiter"
	"sluice/internal/markset"
)

// suspension is a suspended throttle key's end and reason.
type suspension struct {
	until  time.Time
	reason string
}

func decodeSuspension(m limiter.KeyMark) (suspension, bool) {
	return suspension{m.Expires, suspendReason(m.Mark)}, true
}

// lookup returns id's suspension in force at now in snapshot s: what a
// policy without ban settings checks, without a marks call, to know
// whether a key needs the guard at all.
func lookup(s *markset.Snapshot[suspension], id string, now time.Time) (suspension, bool) {
	x, ok := s.Get(id)
	return x, ok && now.Before(x.until)
}

// RefreshSuspended reads the suspension marks into the snapshot of
// suspended keys: how a daemon learns of the suspensions and resumes
// another daemon made in shared marks. A read that a suspension or resume
// made here overtook is dropped (the next refresh reads again).
func (g *Guard) RefreshSuspended(ctx context.Context) error { return g.susp.Refresh(ctx) }

// RunSuspended refreshes the snapshot every interval until ctx ends.
func (g *Guard) RunSuspended(ctx context.Context, every time.Duration, onErr func(error)) {
	g.susp.Run(ctx, every, onErr)
}

// onSuspend calls f once id joins the snapshot of suspended keys, until
// stop is called: a sender waiting on a key of a policy without ban
// settings is told at once, with no goroutine or marks call of its own.
func (g *Guard) onSuspend(id string, f func()) (stop func()) {
	return g.susp.OnChange(func(s *markset.Snapshot[suspension]) bool {
		if _, ok := lookup(s, id, g.clock.Now()); ok {
			f()
			return true
		}
		return false
	})
}

// Deferral is the guard's answer to a sender of a suspended key: try
// later. Error is what the sender hears.
type Deferral struct {
	// Key is the throttle key ("POLICY BUCKET").
	Key string
	// Until is the end of the suspension (zero: not known here).
	Until time.Time
	// Banned: the relay's ban suspended the key; else an administrator.
	Banned bool
	text   string
}

// Error is what the deferred sender hears.
func (d *Deferral) Error() string { return d.text }

// deferral is every sender the guard defers: by a ban (deferBanned) or
// by an administrator's suspension (deferSuspended).
func (g *Guard) deferral(id string, until time.Time, reason string) *Deferral {
	if reason == reasonAdmin || until.IsZero() {
		return g.deferSuspended(id, until, reason)
	}
	return g.deferBanned(id, until, reason)
}

// deferBanned defers a sender of id because the relay banned the key,
// until until.
func (g *Guard) deferBanned(id string, until time.Time, reason string) *Deferral {
	return &Deferral{Key: id, Until: until, Banned: true, text: suspendedText(id, until, reason)}
}

// deferSuspended defers a sender of id because an administrator
// suspended the key, until until (zero: the suspension ended before its
// end was read).
func (g *Guard) deferSuspended(id string, until time.Time, reason string) *Deferral {
	text := id + " was suspended while waiting"
	if !until.IsZero() {
		text = suspendedText(id, until, reason)
	}
	return &Deferral{Key: id, Until: until, text: text}
}

func suspendedText(id string, until time.Time, reason string) string {
	return fmt.Sprintf("%s is suspended until %s: %s", id, until.UTC().Format(time.RFC3339), reason)
}
