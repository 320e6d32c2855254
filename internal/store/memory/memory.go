// Package memory is the in-process limiter.Store: sharded maps of per-key
// state with a hard cap on keys, expiry of idle keys and an explicit choice
// of what happens when the cap is reached.
package memory

import (
	"context"
	"hash/maphash"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/clock"
	"sluice/internal/limiter"
)

// Options configure a Store.
type Options struct {
	// MaxKeys caps the number of keys held in the whole store (default
	// 1,000,000). At the cap, room is made in the shard of the new key, or,
	// when it has nothing to give, in another.
	MaxKeys int
	// Evict chooses what happens at the cap: true evicts the idle key that
	// expires soonest among a sample (keys holding leases are never
	// evicted); false refuses new keys with limiter.ErrFull.
	Evict bool
	// Shards is the number of lock shards, rounded up to a power of two
	// (default 64).
	Shards int
	// SweepInterval is how often every shard is swept for expired keys
	// (default 10s). Expired keys are also dropped when touched.
	SweepInterval time.Duration
	// Clock drives the sweeper (default the real clock).
	Clock clock.Clock
	// Logger receives eviction warnings (default slog.Default()).
	Logger *slog.Logger
}

const (
	kindRate uint8 = iota + 1
	kindLease
	evictSample = 8
)

type entry struct {
	key  string
	kind uint8
	algo limiter.Algorithm
	// exp is when the entry may be dropped (Unix ns); 0 means never (it
	// holds leases without TTL).
	exp int64
	st  limiter.State
	ls  *leaseSet
	// bseq is the sequence number of the key's latest booking (see the
	// booking journal).
	bseq uint64
}

type leaseRec struct {
	id  uint64
	exp int64 // Unix ns; 0: no TTL
}

type leaseSet struct{ l []leaseRec }

type shard struct {
	mu  sync.Mutex
	m   map[string]*entry
	idx int
	_   [24]byte // keep neighbouring shards' locks off one cache line
}

// Store is the in-memory limiter.Store. Create it with New.
type Store struct {
	opts   Options
	seed   maphash.Seed
	shards []shard
	mask   uint64
	n      atomic.Int64
	nextID atomic.Uint64
	// seen is (to within a millisecond) the latest time passed to any
	// operation; the sweeper expires nothing after it, so callers that
	// pass their own times (tests, replays) see the same expiry as the
	// wall clock would give.
	seen    atomic.Int64
	evicted atomic.Uint64
	// guard is the restart guard's start (Unix ns; 0: off): see
	// SetRestartGuard.
	guard atomic.Int64
	// bseq numbers bookings; journal, if set, records each (journal.go).
	bseq    atomic.Uint64
	journal atomic.Pointer[journal]
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

var _ limiter.Store = (*Store)(nil)

// New returns a Store and starts its sweeper; Close stops it.
func New(o Options) *Store {
	if o.MaxKeys <= 0 {
		o.MaxKeys = 1_000_000
	}
	if o.Shards <= 0 {
		o.Shards = 64
	}
	n := 1
	for n < o.Shards {
		n <<= 1
	}
	if o.SweepInterval <= 0 {
		o.SweepInterval = 10 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	s := &Store{
		opts:   o,
		seed:   maphash.MakeSeed(),
		shards: make([]shard, n),
		mask:   uint64(n - 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	for i := range s.shards {
		s.shards[i].m = make(map[string]*entry)
		s.shards[i].idx = i
	}
	go s.sweeper()
	return s
}

// Close stops the sweeper. The store remains usable.
func (s *Store) Close() error {
	s.once.Do(func() { close(s.stop) })
	<-s.done
	s.closeJournal()
	return nil
}

// Len returns the number of keys held.
func (s *Store) Len() int { return int(s.n.Load()) }

func (s *Store) sweeper() {
	defer close(s.done)
	per := s.opts.SweepInterval / time.Duration(len(s.shards))
	if per <= 0 {
		per = time.Millisecond
	}
	next := 0
	for {
		t := s.opts.Clock.NewTimer(per)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C():
		}
		cutoff := min(s.opts.Clock.Now().UnixNano(), s.seen.Load())
		s.sweepShard(&s.shards[next], cutoff)
		next = (next + 1) % len(s.shards)
	}
}

// Sweep drops every expired key now (tests and shutdown use it; the
// sweeper does the same one shard at a time).
func (s *Store) Sweep(now time.Time) {
	for i := range s.shards {
		s.sweepShard(&s.shards[i], now.UnixNano())
	}
}

func (s *Store) sweepShard(sh *shard, now int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for k, e := range sh.m {
		if s.expireLeases(e, now); e.exp != 0 && e.exp <= now {
			delete(sh.m, k)
			s.n.Add(-1)
		}
	}
}

// observe notes the time of an operation for the sweeper.
func (s *Store) observe(now int64) {
	if old := s.seen.Load(); now > old+int64(time.Millisecond) {
		s.seen.CompareAndSwap(old, now)
	}
}

func (s *Store) shardOf(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)&s.mask]
}

// get returns the live entry for key of the given kind, or nil. An
// expired entry, or one of another kind or algorithm (after a config
// change), is dropped.
func (s *Store) get(sh *shard, key string, kind uint8, algo limiter.Algorithm, now int64) *entry {
	s.observe(now)
	e := sh.m[key]
	if e == nil {
		return nil
	}
	s.expireLeases(e, now)
	if (e.exp != 0 && e.exp <= now) || e.kind != kind || e.algo != algo {
		delete(sh.m, key)
		s.n.Add(-1)
		return nil
	}
	return e
}

// create adds an entry for key, making room at the cap. The cap is on the
// whole store: a slot is claimed on the shared count before inserting.
func (s *Store) create(sh *shard, key string, kind uint8, algo limiter.Algorithm, now int64) (*entry, error) {
	for {
		v := s.n.Load()
		if v >= int64(s.opts.MaxKeys) {
			if !s.makeRoom(sh, now) {
				return nil, limiter.ErrFull
			}
			continue
		}
		if s.n.CompareAndSwap(v, v+1) {
			break
		}
	}
	e := &entry{key: key, kind: kind, algo: algo}
	sh.m[e.key] = e
	return e, nil
}

// makeRoom drops expired keys from a sample of the shard, then, if
// eviction is on, the idle key that expires soonest. When the shard has
// nothing to give (it is empty, or holds only leases), the other shards are
// tried, those not locked already (the caller may hold several).
func (s *Store) makeRoom(sh *shard, now int64) bool {
	if s.roomIn(sh, now) {
		return true
	}
	for i := 1; i < len(s.shards); i++ {
		o := &s.shards[(sh.idx+i)%len(s.shards)]
		if !o.mu.TryLock() {
			continue
		}
		ok := s.roomIn(o, now)
		o.mu.Unlock()
		if ok {
			return true
		}
	}
	return false
}

// roomIn makes room in one locked shard (see makeRoom).
func (s *Store) roomIn(sh *shard, now int64) bool {
	var victim *entry
	seen := 0
	for k, e := range sh.m {
		s.expireLeases(e, now)
		if e.exp != 0 && e.exp <= now {
			delete(sh.m, k)
			s.n.Add(-1)
			return true
		}
		if e.exp != 0 && (victim == nil || e.exp < victim.exp) {
			victim = e
		}
		if seen++; seen >= evictSample {
			break
		}
	}
	if !s.opts.Evict || victim == nil {
		return false
	}
	delete(sh.m, victim.key)
	s.n.Add(-1)
	if v := s.evicted.Add(1); v&(v-1) == 0 {
		// Log at 1, 2, 4, 8... evictions so a flood does not flood the log.
		s.opts.Logger.Warn("limiter store full: evicting idle keys", "max_keys", s.opts.MaxKeys, "evicted_total", s.evicted.Load())
	}
	return true
}

// lockShards locks the given shards once each, in a fixed order, and
// returns them for unlocking.
func (s *Store) lockShards(shards []*shard, buf []*shard) []*shard {
	if len(shards) == 1 {
		shards[0].mu.Lock()
		return append(buf, shards[0])
	}
	for _, sh := range shards {
		if !slices.Contains(buf, sh) {
			buf = append(buf, sh)
		}
	}
	if len(buf) > 1 {
		slices.SortFunc(buf, func(a, b *shard) int {
			return a.idx - b.idx
		})
	}
	for _, sh := range buf {
		sh.mu.Lock()
	}
	return buf
}

// lockChecks locks the shards of every check's key.
func (s *Store) lockChecks(checks []limiter.Check) []*shard {
	shards := make([]*shard, 0, len(checks))
	for _, c := range checks {
		shards = append(shards, s.shardOf(c.Key))
	}
	return s.lockShards(shards, make([]*shard, 0, len(shards)))
}

func unlockAll(shs []*shard) {
	for _, sh := range shs {
		sh.mu.Unlock()
	}
}

var checkArgs = limiter.CheckRequest

// Hit implements limiter.Store.
func (s *Store) Hit(_ context.Context, now time.Time, n int64, mode limiter.Mode, checks []limiter.Check, out []limiter.Decision) error {
	if err := checkArgs(n, checks, out); err != nil {
		return err
	}
	var shBuf [4]*shard
	var entBuf [4]*entry
	shards, ents := shBuf[:0], entBuf[:0]
	for _, c := range checks {
		shards = append(shards, s.shardOf(c.Key))
	}
	var lockBuf [4]*shard
	locked := s.lockShards(shards, lockBuf[:0])
	defer unlockAll(locked)
	nowNs := now.UnixNano()
	all := true
	for i, c := range checks {
		e := s.get(shards[i], c.Key, kindRate, c.Limit.Algorithm, nowNs)
		ents = append(ents, e)
		if e != nil {
			out[i] = e.st.Decide(now, c, n)
		} else {
			var zero limiter.State
			out[i] = zero.Decide(now, c, n)
		}
		if until := s.guardUntil(c.Limit, nowNs); until != 0 {
			out[i] = guarded(out[i], n, c.Limit, until-nowNs)
		}
		all = all && out[i].Allowed
	}
	if !all && mode == limiter.Leaky {
		return nil
	}
	for i, c := range checks {
		e := ents[i]
		if e == nil {
			// A second check on the same key may have created it.
			if e = s.get(shards[i], c.Key, kindRate, c.Limit.Algorithm, nowNs); e == nil {
				var err error
				if e, err = s.create(shards[i], c.Key, kindRate, c.Limit.Algorithm, nowNs); err != nil {
					return err
				}
			}
		}
		e.st.Record(now, c, n)
		e.exp = e.st.ExpiresAt(c.Limit)
		if !out[i].Allowed && s.guardUntil(c.Limit, nowNs) == 0 {
			// Strict: the refused hit counted; report the new level.
			out[i].Count = e.st.Decide(now, c, 0).Count
		}
	}
	return nil
}

// Peek implements limiter.Store.
func (s *Store) Peek(_ context.Context, now time.Time, n int64, checks []limiter.Check, out []limiter.Decision) error {
	if err := checkArgs(n, checks, out); err != nil {
		return err
	}
	shs := s.lockChecks(checks)
	defer unlockAll(shs)
	nowNs := now.UnixNano()
	for i, c := range checks {
		var st limiter.State
		if e := s.get(s.shardOf(c.Key), c.Key, kindRate, c.Limit.Algorithm, nowNs); e != nil {
			out[i] = e.st.Decide(now, c, n)
		} else {
			out[i] = st.Decide(now, c, n)
		}
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
	shs := s.lockChecks(checks)
	defer unlockAll(shs)
	nowNs := now.UnixNano()
	for _, c := range checks {
		if e := s.get(s.shardOf(c.Key), c.Key, kindRate, c.Limit.Algorithm, nowNs); e != nil {
			e.st.Undo(now, at, c, n)
			e.exp = e.st.ExpiresAt(c.Limit)
		}
	}
	return nil
}

// Reserve implements limiter.Store.
func (s *Store) Reserve(_ context.Context, now time.Time, key string, lim limiter.Limit, n int64, maxWait time.Duration) (limiter.Reservation, error) {
	if err := limiter.CheckReservation(lim, n); err != nil {
		return limiter.Reservation{}, err
	}
	sh := s.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	nowNs := now.UnixNano()
	e := s.get(sh, key, kindRate, limiter.Exact, nowNs)
	var st limiter.State
	stp := &st
	if e != nil {
		stp = &e.st
	}
	from := now
	if until := s.guardUntil(lim, nowNs); until != 0 {
		// Held back by the restart guard: book from its end.
		from = time.Unix(0, until)
		maxWait -= time.Duration(until - nowNs)
	}
	at, ok := stp.Reserve(from, lim, n, maxWait)
	r := limiter.Reservation{Key: key, Limit: lim, N: n, At: at}
	if !ok {
		return r, limiter.ErrTooLong
	}
	if e == nil {
		var err error
		if e, err = s.create(sh, key, kindRate, limiter.Exact, nowNs); err != nil {
			return limiter.Reservation{}, err
		}
		e.st = st
	}
	e.exp = e.st.ExpiresAt(lim)
	e.bseq = s.bseq.Add(1)
	if j := s.journal.Load(); j != nil {
		// Before the caller hears its time: a crash after this keeps it.
		j.append(Booking{Seq: e.bseq, Key: key, At: at.UnixNano() | 1, N: n, Exp: e.exp})
	}
	return r, nil
}

// Cancel implements limiter.Store.
func (s *Store) Cancel(_ context.Context, now time.Time, r limiter.Reservation) error {
	sh := s.shardOf(r.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := s.get(sh, r.Key, kindRate, limiter.Exact, now.UnixNano()); e != nil {
		e.st.Cancel(now, r.At, r.N)
		e.exp = e.st.ExpiresAt(r.Limit)
	}
	return nil
}

// expireLeases drops leases past their TTL and recomputes the entry's
// expiry: a lease entry lives while it holds leases.
func (s *Store) expireLeases(e *entry, now int64) {
	if e.kind != kindLease {
		return
	}
	l := e.ls.l
	kept := l[:0]
	var last int64
	noTTL := false
	for _, r := range l {
		if r.exp != 0 && r.exp <= now {
			continue
		}
		kept = append(kept, r)
		if r.exp == 0 {
			noTTL = true
		} else {
			last = max(last, r.exp)
		}
	}
	e.ls.l = kept
	switch {
	case len(kept) == 0:
		e.exp = now // drop it
	case noTTL:
		e.exp = 0
	default:
		e.exp = last
	}
}

// Acquire implements limiter.Store.
func (s *Store) Acquire(_ context.Context, now time.Time, key string, capacity int64, ttl time.Duration) (limiter.Lease, int64, bool, error) {
	sh := s.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	nowNs := now.UnixNano()
	e := s.get(sh, key, kindLease, 0, nowNs)
	held := int64(0)
	if e != nil {
		held = int64(len(e.ls.l))
	}
	if capacity > 0 && held >= capacity {
		return limiter.Lease{}, held, false, nil
	}
	if e == nil {
		var err error
		if e, err = s.create(sh, key, kindLease, 0, nowNs); err != nil {
			return limiter.Lease{}, 0, false, err
		}
		e.ls = &leaseSet{}
	}
	r := leaseRec{id: s.nextID.Add(1)}
	if ttl > 0 {
		r.exp = nowNs + int64(ttl)
	}
	e.ls.l = append(e.ls.l, r)
	s.expireLeases(e, nowNs)
	return limiter.Lease{Key: key, ID: r.id}, int64(len(e.ls.l)), true, nil
}

// Release implements limiter.Store.
func (s *Store) Release(_ context.Context, now time.Time, l limiter.Lease) (int64, error) {
	sh := s.shardOf(l.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	nowNs := now.UnixNano()
	e := s.get(sh, l.Key, kindLease, 0, nowNs)
	if e == nil {
		return 0, nil
	}
	for i, r := range e.ls.l {
		if r.id == l.ID {
			last := len(e.ls.l) - 1
			e.ls.l[i] = e.ls.l[last]
			e.ls.l = e.ls.l[:last]
			break
		}
	}
	held := int64(len(e.ls.l))
	if held == 0 {
		delete(sh.m, l.Key)
		s.n.Add(-1)
	}
	return held, nil
}

// Held implements limiter.Store.
func (s *Store) Held(_ context.Context, now time.Time, key string) (int64, error) {
	sh := s.shardOf(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := s.get(sh, key, kindLease, 0, now.UnixNano()); e != nil {
		return int64(len(e.ls.l)), nil
	}
	return 0, nil
}
