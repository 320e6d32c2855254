package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"sluice/internal/limiter"
)

var checkArgs = limiter.CheckRequest

// checkKeys returns the Redis keys of checks, which in Cluster mode must
// share a slot.
func (s *Store) checkKeys(checks []limiter.Check) ([]string, error) {
	keys := make([]string, len(checks))
	for i, c := range checks {
		keys[i] = s.rkey(c.Key)
	}
	return keys, s.sameSlot(keys)
}

// appendChecks appends six script arguments per check (see rate.lua) and
// returns the set of algorithms used.
func appendChecks(args []string, checks []limiter.Check) ([]string, int) {
	set := 0
	for _, c := range checks {
		lim := c.Limit
		algo, x, burst := "e", int64(0), int64(0)
		switch lim.Algorithm {
		case limiter.Anvil:
			algo, x = "a", int64(lim.Period/time.Second)
			set |= useAnvil
		case limiter.Exact:
			set |= useExact
		case limiter.Smooth:
			algo, x, burst = "s", int64(lim.Period)/lim.N, lim.Burst
			if burst <= 0 {
				burst = lim.N
			}
			set |= useSmooth
		}
		args = append(args, algo, itoa(lim.N), itoa(int64(lim.Period)), itoa(x), itoa(burst), strconv.Itoa(int(c.Counter)))
	}
	return args, set
}

// decisions reads the reply of hit or peek: keys delta, now, then five
// integers per decision.
func (s *Store) decisions(op string, v []int64, t1 time.Time, out []limiter.Decision) error {
	if len(v) != 3+5*len(out) {
		return s.malformed(op, v)
	}
	s.keyDelta.Add(v[0])
	s.clock(v[1], v[2], t1)
	for i := range out {
		d := v[3+5*i:]
		retry := time.Duration(d[3])
		if d[3] < 0 {
			retry = limiter.Never
		}
		out[i] = limiter.Decision{Allowed: d[0] == 1, Count: d[1], Remaining: d[2], RetryAfter: retry, Reset: time.Duration(d[4])}
	}
	return nil
}

// Hit implements limiter.Store.
func (s *Store) Hit(ctx context.Context, now time.Time, n int64, mode limiter.Mode, checks []limiter.Check, out []limiter.Decision) error {
	strict := "0"
	if mode == limiter.Strict {
		strict = "1"
	}
	return s.decide(ctx, "hit", &hitScripts, now, n, checks, out, strict)
}

// Peek implements limiter.Store.
func (s *Store) Peek(ctx context.Context, now time.Time, n int64, checks []limiter.Check, out []limiter.Decision) error {
	return s.decide(ctx, "peek", &peekScripts, now, n, checks, out)
}

// decide runs Hit's or Peek's script (op names it in errors): the time
// arguments, n, extra, then the checks; it fills out.
func (s *Store) decide(ctx context.Context, op string, scripts *[8]*script, now time.Time, n int64, checks []limiter.Check, out []limiter.Decision, extra ...string) error {
	if err := checkArgs(n, checks, out); err != nil {
		return err
	}
	if len(checks) == 0 {
		return nil
	}
	keys, err := s.checkKeys(checks)
	if err != nil {
		return err
	}
	args, err := s.timeArgs(now, make([]string, 0, 3+len(extra)+6*len(checks)))
	if err != nil {
		return err
	}
	args, set := appendChecks(append(append(args, itoa(n)), extra...), checks)
	v, t1, err := s.eval(ctx, op, scripts[set], keys, args)
	if err != nil {
		return err
	}
	return s.decisions(op, v, t1, out[:len(checks)])
}

// Undo implements limiter.Store. With Redis TIME, at (the caller's clock)
// is moved to the server's by a lower bound of their offset: Undo then
// takes back the hit or one recorded a little earlier, which keeps the
// window at least as full as it should be.
func (s *Store) Undo(ctx context.Context, now, at time.Time, n int64, checks []limiter.Check) error {
	var out [1]limiter.Decision
	for _, c := range checks {
		if err := checkArgs(n, []limiter.Check{c}, out[:]); err != nil {
			return err
		}
	}
	if len(checks) == 0 || n == 0 {
		return nil
	}
	keys, err := s.checkKeys(checks)
	if err != nil {
		return err
	}
	args, err := s.timeArgs(now, make([]string, 0, 5+6*len(checks)))
	if err != nil {
		return err
	}
	atNs := max(s.serverTime(at), int64(time.Second)) &^ 1
	args, set := appendChecks(append(args, itoa(atNs), itoa(atNs/int64(time.Second)), itoa(n)), checks)
	v, t1, err := s.eval(ctx, "undo", undoScripts[set], keys, args)
	if err != nil {
		return err
	}
	if len(v) != 3 {
		return s.malformed("undo", v)
	}
	s.keyDelta.Add(v[0])
	s.clock(v[1], v[2], t1)
	return nil
}

// resvKey names a reservation this store gave out, by the caller's view.
type resvKey struct {
	key   string
	at, n int64
}

// maxResv bounds the reservations remembered for Cancel.
const maxResv = 1 << 16

// Reserve implements limiter.Store. With Redis TIME the slot is decided on
// the server's clock and At is given on the local one, rounded up by the
// reply's travel time, so that a caller sleeping until At never starts
// early.
func (s *Store) Reserve(ctx context.Context, now time.Time, key string, lim limiter.Limit, n int64, maxWait time.Duration) (limiter.Reservation, error) {
	if err := limiter.CheckReservation(lim, n); err != nil {
		return limiter.Reservation{}, err
	}
	args, err := s.timeArgs(now, make([]string, 0, 6))
	if err != nil {
		return limiter.Reservation{}, err
	}
	args = append(args, itoa(lim.N), itoa(int64(lim.Period)), itoa(n), itoa(int64(maxWait)))
	v, t1, err := s.eval(ctx, "reserve", reserveScript, []string{s.rkey(key)}, args)
	if err != nil {
		return limiter.Reservation{}, err
	}
	if len(v) != 6 {
		return limiter.Reservation{}, s.malformed("reserve", v)
	}
	s.keyDelta.Add(v[1])
	s.clock(v[2], v[3], t1)
	r := limiter.Reservation{Key: key, Limit: lim, N: n}
	if v[0] == 0 {
		return r, limiter.ErrTooLong
	}
	slot := v[4]*int64(time.Second) + v[5]
	r.At = time.Unix(0, slot)
	if !s.opts.UseCallerTime {
		// slot - (server now - local arrival): later than the moment the
		// local clock reaches slot on the server's.
		r.At = time.Unix(0, slot-(v[2]*int64(time.Second)+v[3]-t1.UnixNano()))
		if v[0] == 1 {
			s.mu.Lock()
			if len(s.resv) < maxResv {
				s.resv[resvKey{key, r.At.UnixNano(), n}] = slot
			}
			s.mu.Unlock()
		}
	}
	if v[0] == 2 {
		return r, limiter.ErrTooLong
	}
	return r, nil
}

// Cancel implements limiter.Store.
func (s *Store) Cancel(ctx context.Context, now time.Time, r limiter.Reservation) error {
	if err := r.Limit.Validate(); err != nil || r.N < 1 {
		return fmt.Errorf("%w: cancel of a malformed reservation: %v", limiter.ErrBadRequest, err)
	}
	slot := r.At.UnixNano()
	if !s.opts.UseCallerTime {
		s.mu.Lock()
		k := resvKey{r.Key, slot, r.N}
		if v, ok := s.resv[k]; ok {
			slot = v
			delete(s.resv, k)
		} else {
			slot = s.serverTime(r.At)
		}
		s.mu.Unlock()
	}
	args, err := s.timeArgs(now, make([]string, 0, 5))
	if err != nil {
		return err
	}
	args = append(args, itoa(slot&^1), itoa(r.N), itoa(int64(r.Limit.Period)))
	v, t1, err := s.eval(ctx, "cancel", cancelScript, []string{s.rkey(r.Key)}, args)
	if err != nil {
		return err
	}
	if len(v) != 3 {
		return s.malformed("cancel", v)
	}
	s.keyDelta.Add(v[0])
	s.clock(v[1], v[2], t1)
	return nil
}

// prune forgets reservations whose time has passed.
func (s *Store) prune(now time.Time) {
	cut := now.Add(-time.Minute).UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.resv {
		if k.at < cut {
			delete(s.resv, k)
		}
	}
	for l, r := range s.leases {
		if !r.renew && now.After(r.until) {
			delete(s.leases, l)
		}
	}
}
