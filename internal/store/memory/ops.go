package memory

import (
	"context"
	"time"

	"sluice/internal/limiter"
)

var checkArgs = limiter.CheckRequest

// atRest is a rate key's expiry: exp, or now when it holds nothing (an
// exact log emptied by an undo, a hit of zero events), so that it goes as
// any key at rest goes.
func atRest(exp, nowNs int64) int64 {
	if exp == 0 {
		return nowNs
	}
	return exp
}

// Record indices move when a key is removed (the last record takes its
// place), and any create may remove keys at rest: an index is looked up
// afresh after anything that may have removed one.

// decide returns the decision on one check, changing nothing but the
// trim of an exact log, and the key's record (-1: none); st is left
// holding the key's state as decided on.
func (s *Store) decide(sh *shard, h uint64, now time.Time, n int64, c *limiter.Check, st *limiter.State) (limiter.Decision, int) {
	nowNs := now.UnixNano()
	*st = limiter.State{}
	i := s.get(sh, c.Key, h, kindRate, c.Limit.Algorithm, nowNs)
	if i < 0 {
		sh.loadZero(st, c.Limit.Algorithm)
		return st.Decide(now, *c, n), -1
	}
	sh.load(i, st)
	d := st.Decide(now, *c, n)
	if sh.recs.s[i].nev == spilled {
		// The trim may have moved the spilled log's events in place
		// (an inline log was trimmed in a copy: nothing to write back).
		sh.save(i, st)
	}
	return d, i
}

// Hit implements limiter.Store.
func (s *Store) Hit(_ context.Context, now time.Time, n int64, mode limiter.Mode, checks []limiter.Check, out []limiter.Decision) error {
	if err := checkArgs(n, checks, out); err != nil {
		return err
	}
	var hb [4]uint64
	var sb [4]*shard
	hs, shs := hb[:0], sb[:0]
	for i := range checks {
		h := s.hash(checks[i].Key)
		hs, shs = append(hs, h), append(shs, s.shardOf(h))
	}
	if len(shs) == 1 {
		shs[0].mu.Lock()
		defer shs[0].mu.Unlock()
	} else {
		var lb [4]*shard
		held := lockShards(shs, lb[:0])
		defer unlockAll(held)
	}
	nowNs := now.UnixNano()
	all := true
	// The records found (of the first four checks), and their shards'
	// moves then: still theirs unless a removal happened since.
	var idx [4]int
	var moves [4]uint64
	var st limiter.State // a lone check's state, recorded on as decided on
	for i := range checks {
		c := &checks[i]
		d, k := s.decide(shs[i], hs[i], now, n, c, &st)
		if i < len(idx) {
			idx[i], moves[i] = k, shs[i].moves
		}
		if until := s.guardUntil(c.Limit, nowNs); until != 0 {
			d = guarded(d, n, c.Limit, until-nowNs)
		}
		out[i] = d
		all = all && d.Allowed
	}
	if !all && mode == limiter.Leaky {
		return nil
	}
	for i, c := range checks {
		sh := shs[i]
		k := -1
		if i < len(idx) && sh.moves == moves[i] {
			k = idx[i]
		}
		fresh := k >= 0 && len(checks) == 1 // st still holds its state
		if k < 0 {
			k = s.get(sh, c.Key, hs[i], kindRate, c.Limit.Algorithm, nowNs)
		}
		if k < 0 {
			var err error
			if k, err = s.create(sh, c.Key, hs[i], kindRate, c.Limit.Algorithm, nowNs); err != nil {
				return err
			}
		}
		if !fresh {
			st = limiter.State{}
			sh.load(k, &st)
		}
		st.Record(now, c, n)
		if !out[i].Allowed && s.guardUntil(c.Limit, nowNs) == 0 {
			// Strict: the refused hit counted; report the new level.
			out[i].Count = st.Decide(now, c, 0).Count
		}
		sh.save(k, &st)
		sh.setExp(k, atRest(st.ExpiresAt(c.Limit), nowNs))
		sh.markDirty(k)
	}
	return nil
}

// Peek implements limiter.Store.
func (s *Store) Peek(_ context.Context, now time.Time, n int64, checks []limiter.Check, out []limiter.Decision) error {
	if err := checkArgs(n, checks, out); err != nil {
		return err
	}
	var hb [4]uint64
	var sb, lb [4]*shard
	hs, shs, held := s.lockKeys(checks, hb[:0], sb[:0], lb[:0])
	defer unlockAll(held)
	nowNs := now.UnixNano()
	var st limiter.State
	for i, c := range checks {
		out[i], _ = s.decide(shs[i], hs[i], now, n, &checks[i], &st)
		if until := s.guardUntil(c.Limit, nowNs); until != 0 {
			out[i] = guarded(out[i], n, c.Limit, until-nowNs)
		}
		if out[i].Allowed {
			out[i].Count -= n
		}
	}
	return nil
}

// Undo implements limiter.Store.
func (s *Store) Undo(_ context.Context, now, at time.Time, n int64, checks []limiter.Check) error {
	var out [1]limiter.Decision
	for _, c := range checks {
		if err := checkArgs(n, []limiter.Check{c}, out[:]); err != nil {
			return err
		}
	}
	var hb [4]uint64
	var sb, lb [4]*shard
	hs, shs, held := s.lockKeys(checks, hb[:0], sb[:0], lb[:0])
	defer unlockAll(held)
	nowNs := now.UnixNano()
	for i, c := range checks {
		sh := shs[i]
		if k := s.get(sh, c.Key, hs[i], kindRate, c.Limit.Algorithm, nowNs); k >= 0 {
			var st limiter.State
			sh.load(k, &st)
			st.Undo(now, at, c, n)
			sh.save(k, &st)
			sh.setExp(k, atRest(st.ExpiresAt(c.Limit), nowNs))
			sh.markDirty(k)
		}
	}
	return nil
}

// Reserve implements limiter.Store.
func (s *Store) Reserve(_ context.Context, now time.Time, key string, lim limiter.Limit, n int64, maxWait time.Duration) (limiter.Reservation, error) {
	if err := limiter.CheckReservation(lim, n); err != nil {
		return limiter.Reservation{}, err
	}
	h := s.hash(key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	nowNs := now.UnixNano()
	k := s.get(sh, key, h, kindRate, limiter.Exact, nowNs)
	var st limiter.State
	if k >= 0 {
		sh.load(k, &st)
	} else {
		sh.loadZero(&st, limiter.Exact)
	}
	from := now
	if until := s.guardUntil(lim, nowNs); until != 0 {
		// Held back by the restart guard: book from its end.
		from = time.Unix(0, until)
		maxWait -= time.Duration(until - nowNs)
	}
	at, ok := st.Reserve(from, lim, n, maxWait)
	r := limiter.Reservation{Key: key, Limit: lim, N: n, At: at}
	if !ok {
		if k >= 0 { // nothing booked; the log may have been trimmed
			sh.save(k, &st)
			sh.setExp(k, atRest(st.ExpiresAt(lim), nowNs))
		}
		return r, limiter.ErrTooLong
	}
	if k < 0 {
		// The booking is in the shard's scratch log, which a create
		// (making room, growing the tables) does not touch.
		var err error
		if k, err = s.create(sh, key, h, kindRate, limiter.Exact, nowNs); err != nil {
			return limiter.Reservation{}, err
		}
	}
	sh.save(k, &st)
	exp := st.ExpiresAt(lim)
	sh.setExp(k, exp)
	seq := s.bseq.Add(1)
	sh.recs.s[k].t = int64(seq)
	sh.markDirty(k)
	// Before the caller hears its time: a crash after this keeps it.
	s.persist.log.book(booking{seq: seq, key: key, at: at.UnixNano() | 1, n: n, exp: exp})
	return r, nil
}

// Cancel implements limiter.Store.
func (s *Store) Cancel(_ context.Context, now time.Time, r limiter.Reservation) error {
	h := s.hash(r.Key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if k := s.get(sh, r.Key, h, kindRate, limiter.Exact, now.UnixNano()); k >= 0 {
		var st limiter.State
		sh.load(k, &st)
		st.Cancel(now, r.At, r.N)
		sh.save(k, &st)
		sh.setExp(k, atRest(st.ExpiresAt(r.Limit), now.UnixNano()))
		sh.markDirty(k)
	}
	return nil
}

// expireLeases drops the leases of record i past their TTL and sets its
// expiry: a lease key lives while it holds leases. It looks at the leases
// only once the earliest TTL among them (d[1]) has passed: a key whose
// leases have none (every session's) costs nothing however many it holds.
func (s *Store) expireLeases(sh *shard, i int, now int64) {
	if first := sh.recs.s[i].d[1]; first == 0 || first > now {
		return
	}
	l := sh.leaseSet(i)
	kept := l[:0]
	var last, first int64
	noTTL := false
	for _, r := range l {
		if r.exp != 0 && r.exp <= now {
			delete(sh.leaseAt, r.id)
			continue
		}
		sh.leaseAt[r.id] = uint32(len(kept))
		kept = append(kept, r)
		if r.exp == 0 {
			noTTL = true
		} else {
			last = max(last, r.exp)
			if first == 0 || r.exp < first {
				first = r.exp
			}
		}
	}
	sh.setLeases(i, kept)
	sh.recs.s[i].d[1] = first
	switch {
	case len(kept) == 0:
		sh.setExp(i, now) // drop it
	case noTTL:
		sh.recs.s[i].exp = 0
	default:
		sh.setExp(i, last)
	}
}

// Acquire implements limiter.Store. It costs the same whatever the key
// holds: the lease is appended, its place kept in leaseAt.
func (s *Store) Acquire(_ context.Context, now time.Time, key string, capacity int64, ttl time.Duration) (limiter.Lease, int64, bool, error) {
	h := s.hash(key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	nowNs := now.UnixNano()
	k := s.get(sh, key, h, kindLease, 0, nowNs)
	held := int64(0)
	if k >= 0 {
		held = int64(len(sh.leaseSet(k)))
	}
	if capacity > 0 && held >= capacity {
		return limiter.Lease{}, held, false, nil
	}
	if k < 0 {
		var err error
		if k, err = s.create(sh, key, h, kindLease, 0, nowNs); err != nil {
			return limiter.Lease{}, 0, false, err
		}
		sh.newLeaseSet(k)
	}
	r := leaseRec{id: s.nextID.Add(1)}
	if ttl > 0 {
		r.exp = nowNs + int64(ttl)
	}
	ls := sh.leaseSet(k)
	sh.leaseAt[r.id] = uint32(len(ls))
	sh.setLeases(k, append(ls, r))
	// The key's expiry: none while a lease without a TTL is held, else
	// its last lease's.
	rec := &sh.recs.s[k]
	switch {
	case r.exp == 0:
		rec.exp = 0
	case len(ls) == 0 || rec.exp != 0:
		sh.setExp(k, max(rec.exp, r.exp))
	}
	if r.exp != 0 && (rec.d[1] == 0 || r.exp < rec.d[1]) {
		rec.d[1] = r.exp
	}
	return limiter.Lease{Key: key, ID: r.id}, held + 1, true, nil
}

// Release implements limiter.Store. It costs the same whatever the key
// holds: leaseAt has the lease's place, which the last lease takes.
func (s *Store) Release(_ context.Context, now time.Time, l limiter.Lease) (int64, error) {
	h := s.hash(l.Key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := s.get(sh, l.Key, h, kindLease, 0, now.UnixNano())
	if k < 0 {
		return 0, nil
	}
	ls := sh.leaseSet(k)
	if at, ok := sh.leaseAt[l.ID]; ok && int(at) < len(ls) && ls[at].id == l.ID {
		last := len(ls) - 1
		ls[at] = ls[last]
		sh.leaseAt[ls[at].id] = at
		delete(sh.leaseAt, l.ID)
		ls = ls[:last]
	}
	sh.setLeases(k, ls)
	held := int64(len(ls))
	if held == 0 {
		sh.remove(k)
		s.n.Add(-1)
	}
	return held, nil
}

// Held implements limiter.Store.
func (s *Store) Held(_ context.Context, now time.Time, key string) (int64, error) {
	h := s.hash(key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if k := s.get(sh, key, h, kindLease, 0, now.UnixNano()); k >= 0 {
		return int64(len(sh.leaseSet(k))), nil
	}
	return 0, nil
}
