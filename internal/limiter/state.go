package limiter

import (
	"time"
)

// State is one key's rate state for the in-process algorithms. Stores that
// keep state in their own process (store/memory) hold one State per key and
// call its methods under their own lock; the Redis store implements the
// same rules in Lua, and store/storetest holds both to them.
type State struct {
	// T is the Anvil window start in Unix seconds (0: no window), or the
	// Smooth theoretical arrival time in Unix nanoseconds.
	T int64
	// Counts are the Anvil counters of the window.
	Counts [MaxCounters]uint32
	// Log is the Exact event log (nil for other algorithms).
	Log *EventLog
}

// EventLog is an Exact limit's event times, oldest first, in Unix
// nanoseconds. Times may lie in the future (reservations); they never
// decrease.
type EventLog struct {
	t    []int64
	head int
}

func (l *EventLog) len() int { return len(l.t) - l.head }

func (l *EventLog) at(i int) int64 { return l.t[l.head+i] }

// trim drops events at or before cutoff, and then, if keep > 0, all but
// the newest keep.
func (l *EventLog) trim(cutoff int64, keep int) {
	for l.head < len(l.t) && l.t[l.head] <= cutoff {
		l.head++
	}
	if over := l.len() - keep; keep > 0 && over > 0 {
		l.head += over
	}
	if l.head > 0 && l.head >= len(l.t)/2 {
		n := copy(l.t, l.t[l.head:])
		l.t = l.t[:n]
		l.head = 0
	}
}

func (l *EventLog) push(t int64, n int64) {
	for ; n > 0; n-- {
		l.t = append(l.t, t)
	}
}

// remove deletes up to n events with time exactly t, newest first.
func (l *EventLog) remove(t int64, n int64) {
	for i := len(l.t) - 1; i >= l.head && n > 0; i-- {
		if l.t[i] == t {
			l.t = append(l.t[:i], l.t[i+1:]...)
			n--
		} else if l.t[i] < t {
			break
		}
	}
}

// removeHits deletes up to n hit (not reserved) events, the oldest first
// among those at or after t: a hit is recorded at its caller's time or a
// little later, never earlier, so this finds it or a later one, which only
// keeps the window fuller for longer.
func (l *EventLog) removeHits(t int64, n int64) {
	for i := l.head; i < len(l.t) && n > 0; {
		if e := l.t[i]; e >= t && !isReservation(e) {
			l.t = append(l.t[:i], l.t[i+1:]...)
			n--
			continue
		}
		i++
	}
}

// Len returns the number of events held.
func (l *EventLog) Len() int {
	if l == nil {
		return 0
	}
	return l.len()
}

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// Decide returns the decision a hit of n events would get now, without
// changing anything.
func (s *State) Decide(now time.Time, c Check, n int64) Decision {
	lim := c.Limit
	switch lim.Algorithm {
	case Anvil:
		cur := int64(0)
		if !s.anvilStale(now, lim) {
			cur = int64(s.Counts[c.Counter])
		}
		d := Decision{Allowed: cur+n <= lim.N, Count: cur + n}
		end := time.Unix(s.T+int64(lim.Period/time.Second)+1, 0)
		if s.anvilStale(now, lim) {
			end = time.Unix(now.Unix()+int64(lim.Period/time.Second)+1, 0)
		}
		d.Reset = end.Sub(now)
		if d.Allowed {
			d.Remaining = lim.N - cur - n
		} else {
			d.Count = cur
			d.Remaining = max(lim.N-cur, 0)
			d.RetryAfter = d.Reset
			if n > lim.N {
				d.RetryAfter = Never
			}
		}
		return d
	case Exact:
		nowNs := now.UnixNano()
		s.trimLog(nowNs, lim)
		base := s.hitTime(nowNs)
		at := s.exactEarliest(base, lim, n)
		held := int64(s.Log.Len())
		d := Decision{Allowed: at <= base, Count: held}
		if d.Allowed {
			d.Count += n
		}
		d.Remaining = max(lim.N-d.Count, 0)
		if held > 0 {
			d.Reset = time.Duration(s.Log.at(s.Log.len()-1) + int64(lim.Period) - nowNs)
		}
		if !d.Allowed {
			d.RetryAfter = time.Duration(at - base)
			if n > lim.N {
				d.RetryAfter = Never
			}
		}
		return d
	case Smooth:
		nowNs := now.UnixNano()
		iv := int64(lim.Period) / lim.N
		b := lim.BurstOrN()
		tat := max(s.T, nowNs)
		newTat := tat + n*iv
		allowAt := newTat - b*iv
		d := Decision{Allowed: allowAt <= nowNs}
		if d.Allowed {
			d.Count = ceilDiv(newTat-nowNs, iv)
			d.Reset = time.Duration(newTat - nowNs)
		} else {
			d.Count = ceilDiv(tat-nowNs, iv)
			d.Reset = time.Duration(tat - nowNs)
			d.RetryAfter = time.Duration(allowAt - nowNs)
			if n > b {
				d.RetryAfter = Never
			}
		}
		d.Remaining = max(b-d.Count, 0)
		return d
	}
	return Decision{}
}

func (s *State) anvilStale(now time.Time, lim Limit) bool {
	return s.T == 0 || s.T+int64(lim.Period/time.Second) < now.Unix()
}

func (s *State) trimLog(nowNs int64, lim Limit) {
	if s.Log != nil {
		s.Log.trim(nowNs-int64(lim.Period), 0)
	}
}

// Exact logs mark reservations by setting the lowest bit of their time
// (one nanosecond is below any clock's precision here) and clear it on
// hits, so a hit can tell a booked slot it must wait for from another
// caller's hit that merely read the clock a moment later.
func isReservation(t int64) bool { return t&1 == 1 }

// hitTime is the time a hit made now is recorded at: now, or the newest
// hit's time if a concurrent caller with a later clock reading got there
// first (the log never goes back in time).
func (s *State) hitTime(nowNs int64) int64 {
	t := nowNs &^ 1
	l := s.Log
	for i := l.Len() - 1; i >= 0; i-- {
		if e := l.at(i); !isReservation(e) {
			if e > t {
				t = e
			}
			break
		}
	}
	return t
}

// exactEarliest is the earliest time at or after now when n more events
// keep at most N in every window of Period, after the events already held.
func (s *State) exactEarliest(nowNs int64, lim Limit, n int64) int64 {
	if n > lim.N {
		return int64(Never)
	}
	t := nowNs
	l := s.Log
	if l.Len() == 0 {
		return t
	}
	if last := l.at(l.len()-1) &^ 1; last > t {
		t = last
	}
	if k := l.len() - int(lim.N-n+1); k >= 0 {
		t = max(t, l.at(k)&^1+int64(lim.Period))
	}
	return t
}

// Record adds n events now. It records them even if Decide would refuse
// (Strict counting); Anvil counters stop at the largest int32, as anvil's
// do.
func (s *State) Record(now time.Time, c Check, n int64) {
	lim := c.Limit
	switch lim.Algorithm {
	case Anvil:
		if s.anvilStale(now, lim) {
			s.T = now.Unix()
			s.Counts = [MaxCounters]uint32{}
		}
		v := int64(s.Counts[c.Counter]) + n
		s.Counts[c.Counter] = uint32(min(v, Unlimited))
	case Exact:
		if n <= 0 {
			return
		}
		nowNs := now.UnixNano()
		if s.Log == nil {
			s.Log = &EventLog{}
		}
		s.trimLog(nowNs, lim)
		t := s.hitTime(nowNs)
		if l := s.Log.len(); l > 0 && s.Log.at(l-1) > t {
			t = s.Log.at(l-1) + 1 // after a booked slot (Strict only)
		}
		s.Log.push(t, min(n, lim.N))
		if last := s.Log.at(s.Log.len() - 1); !isReservation(last) || last <= nowNs {
			// Strict counting of a flood keeps at most 4N events (bounded
			// by MaxExactN): enough to report how far over a key is, and
			// the client must wait for all of them to leave the window.
			s.Log.trim(nowNs-int64(lim.Period), int(min(4*lim.N, MaxExactN)))
		}
	case Smooth:
		nowNs := now.UnixNano()
		iv := int64(lim.Period) / lim.N
		s.T = max(s.T, nowNs) + n*iv
		// Strict counting may push the bucket past full; cap the debt at
		// one period beyond a full bucket so a stopped client recovers.
		if ceiling := nowNs + lim.BurstOrN()*iv + int64(lim.Period); s.T > ceiling {
			s.T = ceiling
		}
	}
}

// Undo takes back n events recorded at time at.
func (s *State) Undo(now, at time.Time, c Check, n int64) {
	lim := c.Limit
	switch lim.Algorithm {
	case Anvil:
		if s.anvilStale(now, lim) || at.Unix() < s.T {
			return
		}
		v := int64(s.Counts[c.Counter]) - n
		s.Counts[c.Counter] = uint32(max(v, 0))
	case Exact:
		if s.Log != nil {
			s.Log.removeHits(at.UnixNano()&^1, n)
		}
	case Smooth:
		nowNs := now.UnixNano()
		if s.T <= nowNs {
			return
		}
		iv := int64(lim.Period) / lim.N
		s.T = max(s.T-n*iv, nowNs)
	}
}

// Reserve books n events at the earliest time the limit allows, if that is
// within maxWait of now, and returns that time. ok is false (and nothing is
// booked) when the wait would be longer, or when MaxExactN events are
// already booked on the key.
func (s *State) Reserve(now time.Time, lim Limit, n int64, maxWait time.Duration) (at time.Time, ok bool) {
	nowNs := now.UnixNano()
	if s.Log == nil {
		s.Log = &EventLog{}
	}
	s.trimLog(nowNs, lim)
	t := s.exactEarliest(nowNs, lim, n)
	if t == int64(Never) || s.Log.Len()+int(n) > MaxExactN {
		return time.Time{}, false
	}
	if time.Duration(t-nowNs) > maxWait {
		return time.Unix(0, t&^1), false
	}
	s.Log.push(t|1, n)
	return time.Unix(0, t&^1), true
}

// Cancel gives back a reservation of n events at time at, if it has not
// come yet.
func (s *State) Cancel(now time.Time, at time.Time, n int64) {
	if s.Log != nil && at.After(now) {
		s.Log.remove(at.UnixNano()|1, n)
	}
}

// ExpiresAt returns the Unix nanosecond time after which the state holds
// nothing worth keeping for lim.
func (s *State) ExpiresAt(lim Limit) int64 {
	switch lim.Algorithm {
	case Anvil:
		if s.T == 0 {
			return 0
		}
		// Stale once start+period < now in whole seconds.
		return (s.T + int64(lim.Period/time.Second) + 1) * int64(time.Second)
	case Exact:
		if s.Log.Len() == 0 {
			return 0
		}
		return s.Log.at(s.Log.len()-1) + int64(lim.Period)
	case Smooth:
		return s.T
	}
	return 0
}
