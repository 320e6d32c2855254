// Package memory is the in-process limiter.Store: sharded tables of
// fixed-size records outside the Go heap (table.go), a hard cap on keys,
// expiry of idle keys, and at the cap room made only from keys at rest.
package memory

import (
	"hash/maphash"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/clock"
	"sluice/internal/limiter"
)

// DefaultMaxKeys is the key cap when Options.MaxKeys is not set: about
// 1.3 GB of records, index and keys of 40 bytes (docs/limiter.md).
const DefaultMaxKeys = 10_000_000

// Options configure a Store.
type Options struct {
	// MaxKeys caps the number of keys held in the whole store (default
	// DefaultMaxKeys). At the cap, room is made by dropping keys at rest
	// (every limit back at rest: nothing in the window, the bucket empty,
	// no lease held), in the shard of the new key or, when it has none,
	// in another. A key still counting is never dropped for a new one:
	// when only such keys are held, the new key gets limiter.ErrFull,
	// which the limiter answers by its fail mode.
	MaxKeys int
	// Shards is the number of lock shards, rounded up to a power of two
	// (default 64).
	Shards int
	// SweepInterval is how often every shard is swept for expired keys
	// (default 10s). Expired keys are also dropped when touched.
	SweepInterval time.Duration
	// FullLogInterval is the least time between two log lines about new
	// keys refused at the cap (default 1m).
	FullLogInterval time.Duration
	// Clock drives the sweeper (default the real clock).
	Clock clock.Clock
	// Logger receives the warnings about the cap (default slog.Default()).
	Logger *slog.Logger
}

const (
	kindRate uint8 = iota + 1
	kindLease
)

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
	seen atomic.Int64
	// reclaimed counts keys at rest dropped to make room at the cap;
	// refused counts new keys refused there (ErrFull); fullLogged is when
	// (Unix ns) the last line about them was logged.
	reclaimed  atomic.Uint64
	refused    atomic.Uint64
	fullLogged atomic.Int64
	loggedAt   atomic.Uint64 // refused at the last line
	// guard is the restart guard's start (Unix ns; 0: off): see
	// SetRestartGuard.
	guard atomic.Int64
	// bseq numbers bookings, which the store file records (persist.go).
	bseq atomic.Uint64
	// persist is the state of the store file (persist.go).
	persist persistState
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

var _ limiter.Store = (*Store)(nil)

// New returns a Store and starts its sweeper; Close stops it.
func New(o Options) *Store {
	if o.MaxKeys <= 0 {
		o.MaxKeys = DefaultMaxKeys
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
	if o.FullLogInterval <= 0 {
		o.FullLogInterval = time.Minute
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
		s.shards[i].idx = i
	}
	s.persist.log.log = func(err error) {
		o.Logger.Error("throttle slots booked now would be forgotten by a crash", "err", err)
	}
	// The mappings go with the store: when it is unreachable, they are
	// released (Close leaves the store usable, so it cannot).
	runtime.AddCleanup(s, func(shs []shard) {
		for i := range shs {
			shs[i].release()
		}
	}, s.shards)
	go s.sweeper()
	return s
}

// Close stops the sweeper and closes the store file. The store remains
// usable (a snapshot written after Close is a new base).
func (s *Store) Close() error {
	s.once.Do(func() { close(s.stop) })
	<-s.done
	s.closeFile()
	return nil
}

// Len returns the number of keys held.
func (s *Store) Len() int { return int(s.n.Load()) }

// Reclaimed returns how many keys at rest were dropped to make room at
// the cap.
func (s *Store) Reclaimed() uint64 { return s.reclaimed.Load() }

// Refused returns how many new keys were refused at the cap
// (limiter.ErrFull) because every key held was still counting.
func (s *Store) Refused() uint64 { return s.refused.Load() }

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
		sh := &s.shards[next]
		sh.mu.Lock()
		s.sweepShard(sh, cutoff)
		sh.mu.Unlock()
		next = (next + 1) % len(s.shards)
	}
}

// Sweep drops every expired key now (tests and shutdown use it; the
// sweeper does the same one shard at a time).
func (s *Store) Sweep(now time.Time) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		s.sweepShard(sh, now.UnixNano())
		sh.mu.Unlock()
	}
}

// sweepShard drops the expired keys of a locked shard, returns how many,
// and sets its minExp to the earliest expiry left.
func (s *Store) sweepShard(sh *shard, now int64) int {
	dropped := 0
	var next int64
	for i := sh.n - 1; i >= 0; i-- {
		if sh.recs.s[i].kind == kindLease {
			s.expireLeases(sh, i, now)
		}
		// Records after i were seen already; the last moves into i.
		if e := sh.recs.s[i].exp; e != 0 && e <= now {
			sh.remove(i)
			dropped++
		} else if e != 0 && (next == 0 || e < next) {
			next = e
		}
	}
	sh.minExp = next
	s.n.Add(int64(-dropped))
	return dropped
}

// observe notes the time of an operation for the sweeper.
func (s *Store) observe(now int64) {
	if old := s.seen.Load(); now > old+int64(time.Millisecond) {
		s.seen.CompareAndSwap(old, now)
	}
}

func (s *Store) hash(key string) uint64 { return maphash.String(s.seed, key) }

func (s *Store) shardOf(h uint64) *shard { return &s.shards[h&s.mask] }

// get returns the live record of key (hash h) of the given kind, or -1.
// An expired record, or one of another kind or algorithm (after a config
// change), is dropped.
func (s *Store) get(sh *shard, key string, h uint64, kind uint8, algo limiter.Algorithm, now int64) int {
	s.observe(now)
	i := sh.find(key, h)
	if i < 0 {
		return -1
	}
	r := &sh.recs.s[i]
	if r.kind == kindLease {
		s.expireLeases(sh, i, now)
	}
	if (r.exp != 0 && r.exp <= now) || r.kind != kind || r.algo != algo {
		sh.remove(i)
		s.n.Add(-1)
		return -1
	}
	return i
}

// create adds a record for key, making room at the cap. The cap is on the
// whole store: a slot is claimed on the shared count before inserting.
func (s *Store) create(sh *shard, key string, h uint64, kind uint8, algo limiter.Algorithm, now int64) (int, error) {
	for {
		v := s.n.Load()
		if v >= int64(s.opts.MaxKeys) {
			if !s.makeRoom(sh, now) {
				s.noteFull(now)
				return -1, limiter.ErrFull
			}
			continue
		}
		if s.n.CompareAndSwap(v, v+1) {
			break
		}
	}
	i, err := sh.insert(key, h, kind, algo)
	if err != nil {
		// No memory to map, or a shard's key bytes at their bound: the
		// limiter logs it and applies the fail mode.
		s.n.Add(-1)
		return -1, err
	}
	return i, nil
}

// makeRoom drops the keys at rest of the shard, or, when it has none,
// of the first other shard that has some and is not locked already (the
// caller may hold several). A shard's minExp tells without a scan that it
// has none, so a flood of new keys against a store of live keys costs a
// look at each shard's minExp per new key, not a scan.
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

// roomIn drops the keys at rest of one locked shard, if it has any.
func (s *Store) roomIn(sh *shard, now int64) bool {
	if sh.minExp == 0 || sh.minExp > now {
		return false
	}
	n := s.sweepShard(sh, now)
	s.reclaimed.Add(uint64(n))
	return n > 0
}

// noteFull counts a new key refused at the cap and logs it, at most once
// per FullLogInterval, with the number refused since the last line.
func (s *Store) noteFull(now int64) {
	total := s.refused.Add(1)
	last := s.fullLogged.Load()
	if last != 0 && now-last < int64(s.opts.FullLogInterval) || !s.fullLogged.CompareAndSwap(last, now) {
		return
	}
	prev := s.loggedAt.Swap(total)
	s.opts.Logger.Warn("limiter store full: every key held is still counting; new keys get the fail mode (when_full)",
		"max_keys", s.opts.MaxKeys, "refused", total-prev, "refused_total", total, "reclaimed_total", s.reclaimed.Load())
}

// lockShards locks the given shards once each, in a fixed order, and
// returns them for unlocking.
func lockShards(shards []*shard, buf []*shard) []*shard {
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

func unlockAll(shs []*shard) {
	for _, sh := range shs {
		sh.mu.Unlock()
	}
}

// lockKeys hashes the checks' keys into hs, their shards into shs, and
// locks those shards (the list to unlock is returned, built in lk).
func (s *Store) lockKeys(checks []limiter.Check, hs []uint64, shs, lk []*shard) ([]uint64, []*shard, []*shard) {
	for _, c := range checks {
		h := s.hash(c.Key)
		hs = append(hs, h)
		shs = append(shs, s.shardOf(h))
	}
	return hs, shs, lockShards(shs, lk)
}
