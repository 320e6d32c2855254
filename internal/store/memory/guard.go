package memory

import (
	"time"

	"sluice/internal/limiter"
)

// SetRestartGuard holds exact limits back after an unclean stop: until
// since+Period, no exact limit grants anything, and reservations are
// booked at since+Period at the earliest. Events the snapshot missed (those
// between the last snapshot and the crash) all lie before since, so each
// window that could hold one of them has passed by then: even with them
// lost, no window of Period ever holds more than N. Anvil and smooth limits
// are not held. A zero since turns the guard off.
func (s *Store) SetRestartGuard(since time.Time) {
	if since.IsZero() {
		s.guard.Store(0)
		return
	}
	s.guard.Store(since.UnixNano())
}

// guardUntil returns until when lim is held back by the restart guard
// (Unix ns), or 0.
func (s *Store) guardUntil(lim limiter.Limit, nowNs int64) int64 {
	g := s.guard.Load()
	if g == 0 || lim.Algorithm != limiter.Exact {
		return 0
	}
	if until := g + int64(lim.Period); nowNs < until {
		return until
	}
	return 0
}

// guarded turns a decision into a refusal until the guard ends.
func guarded(d limiter.Decision, n int64, lim limiter.Limit, wait int64) limiter.Decision {
	if d.Allowed {
		d.Count -= n
	}
	d.Allowed = false
	d.Remaining = 0
	d.RetryAfter = max(d.RetryAfter, time.Duration(wait))
	if n > lim.N {
		d.RetryAfter = limiter.Never
	}
	d.Reset = max(d.Reset, time.Duration(wait))
	return d
}
