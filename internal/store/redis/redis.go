// Package redis is the limiter.Store kept in Redis, so that several sluice
// daemons share counts, windows, leases and reservations exactly.
//
// # One decision, one script
//
// Every operation is one Lua script (lua/*.lua: a prelude, the modules of
// the algorithms a call uses, a body), run by EVALSHA and loaded by EVAL
// when Redis answers NOSCRIPT. The script reads the state, applies
// the same rules as limiter.State and writes the result, atomically; the
// checks of one Hit are decided together. Scripts read the time from Redis
// TIME, so hosts with skewed clocks agree (Options.UseCallerTime uses the
// time passed in instead, for tests). Time inside scripts has Redis TIME's
// resolution (a microsecond) in that mode and a nanosecond with caller time.
// Needs Redis 7.0 or later (scripts declare whether they write).
//
// # Client
//
// github.com/redis/rueidis, for its automatic pipelining: concurrent
// decisions from many goroutines share one connection and are written
// together, so a busy daemon makes few round trips and syscalls and needs
// no connection pool sized by hand; go-redis would take a pooled connection
// per concurrent call. The store depends only on the narrow conn interface
// (client.go): scripts, DBSIZE or SCAN, PING.
//
// # Keys
//
// A limiter key K is the Redis key PREFIX{K} (see rkey): the braces make K
// the hash tag, so all of K's state is on one Cluster slot. The value's
// Redis type follows the algorithm: anvil a hash (window start, 8
// counters), exact a list of event times (Unix ns as decimal strings, a
// reservation marked by an odd last digit, FIFO by construction, at most
// 4N or MaxExactN entries), smooth a string (GCRA's theoretical arrival
// time), leases a sorted set ("id@owner" scored by expiry). Every key
// carries a TTL at the end of what it holds (window end, newest event +
// period, arrival time, longest lease), set in the same script that
// writes it: nothing outlives its window, even if no host returns.
//
// # Cluster
//
// With Options.Cluster, the keys of one Hit, Peek or Undo must share a hash
// slot, or the call fails with ErrCrossSlot (an ErrBadRequest) before
// reaching Redis: no script can be atomic across slots, and silently
// splitting a check's state is worse. A limiter key containing a hash tag
// of its own ("policy:{rule:user}:0") is stored as PREFIX#K, so that tag
// picks the slot and callers can keep the limits of one rule together.
//
// # Sentinel
//
// With Options.MasterSet, Addrs are Redis Sentinels: the client asks them
// for the master of the set, subscribes to their +switch-master events and
// asks again every few seconds, so it follows a failover by itself. While
// there is no master (from its death until a replica is promoted and the
// client hears of it) every call fails within the deadline and the limiter
// applies its fail mode. The store logs the master it starts with and
// every switch. Replication is asynchronous: what a master acknowledged in
// its last moments and had not yet sent to the replica is lost with it,
// so a key may admit that many events again after the failover.
//
// # Leases
//
// A lease expires in Redis at its TTL, so a host that dies leaks nothing
// for longer than that. Leases acquired without a TTL get Options.LeaseTTL,
// and the store renews them in the background until they are released;
// Close releases what this store still holds.
//
// # The key cap
//
// Redis bounds the keys: set maxmemory, and maxmemory-policy volatile-ttl
// to evict the keys nearest their expiry when full (as store/memory does;
// unlike it, Redis may also evict a key that holds leases), or noeviction
// to have writes refused, which the store reports as limiter.ErrFull.
//
// # Len
//
// Len is this store's count of keys under the prefix: a full count when the
// store starts and every Options.LenInterval (DBSIZE when the database is
// dedicated to sluice, SCAN of the prefix otherwise), plus the keys its own
// scripts created less those they dropped since. Other hosts' keys and keys
// Redis expired appear at the next count.
//
// # Failure
//
// Each call gives up at Options.Deadline and returns the error, wrapped;
// the limiter applies its fail mode. A call that timed out may still have
// been applied by Redis. The client reconnects by itself; Healthy and
// Errors report on it.
//
// # Circuit breaker
//
// A hung Redis (stopped, swapping, a network that drops packets) would
// make every decision wait the whole deadline, and every MTA process
// with it. So after Options.BreakAfter misses in a row (a deadline
// passed, or no connection; an error reply is an answer), the last of
// them at least a deadline after the first, the store's circuit opens:
// calls fail at once with ErrCircuitOpen, and the limiter decides them
// by its fail mode without waiting. (The deadline between the first miss
// and the last means a call sent after the first miss missed too: one
// stall of this host, which times out every call in flight at once, is
// not taken for a hung Redis.) Every Options.ProbeInterval one call goes
// to Redis as a probe; the first answer from Redis (the probe's, a call
// that was in flight, or the health check's PING) closes the circuit.
// Under a hung Redis a decision thus waits at most one deadline, and
// after the first two deadlines only the probes wait at all.
// Opening and closing are logged; Breaker reports the state and counts.
// In Cluster mode there is no breaker: the store cannot tell which
// master a miss came from, and one dead master must not stop the
// decisions the others can make.
package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/limiter"
)

// Options configure a Store.
type Options struct {
	// Addrs are the Redis addresses, host:port (default 127.0.0.1:6379); in
	// Cluster mode, seed nodes. "unix:PATH" is one server's unix socket.
	Addrs []string
	// Username and Password authenticate (AUTH); empty: none.
	Username string
	Password string
	DB       int         // the database number (not in Cluster mode)
	TLS      *tls.Config // nil: plain TCP
	// Cluster connects to a Redis Cluster and checks that the keys of one
	// call share a slot (see the package comment).
	Cluster bool
	// MasterSet, when set, makes Addrs the Redis Sentinels watching this
	// master set: the store asks them for the master and follows it
	// through a failover (see the package comment). SentinelUsername and
	// SentinelPassword authenticate to the Sentinels (Username and
	// Password are for the master).
	MasterSet        string
	SentinelUsername string
	SentinelPassword string
	// KeyPrefix starts every key (default "sluice:"); it may not contain
	// braces.
	KeyPrefix string
	// Deadline bounds each call (default 50ms).
	Deadline time.Duration
	// BreakAfter is how many calls in a row must miss their deadline (or
	// find no connection) before the circuit breaker opens (default 3;
	// negative: never; with Cluster there is no breaker). See the package
	// comment.
	BreakAfter int
	// ProbeInterval is, while the breaker is open, the time between the
	// calls let through to see whether Redis answers again (default
	// 500ms).
	ProbeInterval time.Duration
	// DialTimeout bounds one connection attempt (default 2s).
	DialTimeout time.Duration
	// Owner names this host in its leases (default hostname:pid).
	Owner string
	// LeaseTTL is the TTL in Redis of leases acquired without one (default
	// 60s); the store renews them every third of it until released.
	LeaseTTL time.Duration
	// UseCallerTime decides with the time passed to each call instead of
	// Redis TIME. For tests, and hosts that share one clock.
	UseCallerTime bool
	// DedicatedDB says the database holds only this store's keys, so Len
	// can count them with DBSIZE instead of SCAN.
	DedicatedDB bool
	// LenInterval is how often Len's count is redone from Redis (default 1
	// minute; negative: only at start).
	LenInterval time.Duration
	// WaitReplicas, when above 0, makes every writing call wait (Redis
	// WAIT) until that many replicas hold its write before its decision
	// is returned: a decision acknowledged is then on a replica, and a
	// failover that promotes it loses none (exact limits across a
	// failover). A write not acknowledged within WaitTimeout fails with
	// ErrNotReplicated: the fail mode decides. The cost is a replication
	// round trip on every decision (docs/redis.md).
	WaitReplicas int
	// WaitTimeout bounds the wait for the replicas (default half of
	// Deadline; it must be shorter than Deadline).
	WaitTimeout time.Duration
	// Logger receives warnings (default slog.Default()).
	Logger *slog.Logger
}

// ErrNotReplicated is a write that fewer than Options.WaitReplicas
// replicas acknowledged within Options.WaitTimeout.
var ErrNotReplicated = errors.New("redis store: the write did not reach the replicas in time")

// Store is the Redis limiter.Store. Create it with New.
type Store struct {
	opts   Options
	prefix string
	c      conn
	log    *slog.Logger

	healthy  atomic.Bool
	errs     atomic.Uint64
	brk      breaker
	keyBase  atomic.Int64 // the last full count, less keyDelta then
	keyDelta atomic.Int64 // keys this store's scripts created less dropped
	// offset is, with Redis TIME, a lower bound of the Redis clock less
	// the local one (ns), from the latest reply.
	offset atomic.Int64
	// seenNow is, with caller time, the latest time passed in (Unix ns),
	// and seenAt when (ns since born), so renewal can follow that clock.
	seenNow atomic.Int64
	seenAt  atomic.Int64
	born    time.Time
	warned  atomic.Int64 // Unix second of the last background warning
	// With Sentinel, the master last seen, guarded by masterMu: run
	// looks once a tick, and the first decision after failures looks
	// before it returns, so the switch is logged before the limiter's
	// "recovered" (which that decision's return causes).
	masterMu sync.Mutex
	master   string
	failed   atomic.Bool // the last eval failed for want of Redis

	mu      sync.Mutex
	leases  map[limiter.Lease]leaseRec
	orphans []orphan
	resv    map[resvKey]int64

	bg     context.Context
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	err    error
}

var _ limiter.Store = (*Store)(nil)

// New connects to Redis, checks that it runs Redis 7 scripts, counts the
// keys under the prefix and starts the background work (lease renewal,
// health checks, counting); Close stops it. It fails if Redis cannot be
// reached: the caller chooses to retry or to run without it. Once
// running, the store reconnects by itself.
func New(ctx context.Context, o Options) (*Store, error) {
	if len(o.Addrs) == 0 {
		o.Addrs = []string{"127.0.0.1:6379"}
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = "sluice:"
	}
	if err := checkPrefix(o.KeyPrefix); err != nil {
		return nil, err
	}
	if o.Deadline <= 0 {
		o.Deadline = 50 * time.Millisecond
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = defaultDialTimeout
	}
	if o.WaitReplicas > 0 && o.WaitTimeout <= 0 {
		o.WaitTimeout = o.Deadline / 2
	}
	if o.BreakAfter == 0 {
		o.BreakAfter = defaultBreakAfter
	}
	if o.ProbeInterval <= 0 {
		o.ProbeInterval = defaultProbeInterval
	}
	if o.Owner == "" {
		host, _ := os.Hostname()
		o.Owner = host + ":" + strconv.Itoa(os.Getpid())
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = time.Minute
	}
	if o.LenInterval == 0 {
		o.LenInterval = time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	c, err := dial(o)
	if err != nil {
		if msg := accessDenied(o, err); msg != "" {
			return nil, fmt.Errorf("redis store: connecting to %v: %s: %w", o.Addrs, msg, err)
		}
		return nil, fmt.Errorf("redis store: connecting to %v: %w", o.Addrs, err)
	}
	return newStore(ctx, o, c)
}

func newStore(ctx context.Context, o Options, c conn) (*Store, error) {
	s := &Store{
		opts:   o,
		prefix: o.KeyPrefix,
		c:      c,
		log:    o.Logger,
		born:   time.Now(),
		leases: make(map[limiter.Lease]leaseRec),
		resv:   make(map[resvKey]int64),
		done:   make(chan struct{}),
		brk:    breaker{after: int64(max(o.BreakAfter, 0)), span: o.Deadline, probe: o.ProbeInterval},
	}
	if o.Cluster {
		// One breaker for the store would let a dead master's misses
		// fail the decisions of the live masters' slots.
		s.brk.after = 0
	}
	pctx, cancel := context.WithTimeout(ctx, max(o.Deadline, 5*time.Second))
	defer cancel()
	v, err := c.eval(pctx, probeScript, []string{s.prefix + "{probe}"}, []string{"", ""})
	if err == nil && len(v) == 2 {
		s.clock(v[0], v[1], time.Now())
		err = s.recount(pctx)
	} else if err == nil {
		err = errors.New("unexpected reply")
	}
	if err != nil {
		c.close()
		if msg := accessDenied(o, err); msg != "" {
			return nil, fmt.Errorf("redis store: probing %v: %s: %w", o.Addrs, msg, err)
		}
		if _, ok := serverError(err); ok {
			return nil, fmt.Errorf("redis store: probing %v (Redis 7.0 or later is needed): %w", o.Addrs, err)
		}
		return nil, fmt.Errorf("redis store: probing %v: %w", o.Addrs, err)
	}
	s.healthy.Store(true)
	if s.master = c.primary(); s.master != "" {
		s.log.Info("redis store: following the master named by the Sentinels", "master_set", o.MasterSet, "master", s.master, "sentinels", o.Addrs)
	}
	s.bg, s.cancel = context.WithCancel(context.Background())
	go s.run()
	return s, nil
}

// Close stops the background work, releases the leases this store holds
// and closes the connections. The store cannot be used afterwards.
func (s *Store) Close() error {
	s.once.Do(func() {
		s.cancel()
		<-s.done
		s.err = s.releaseAll()
		s.c.close()
	})
	return s.err
}

// Len returns the number of keys under the prefix, as last counted plus
// what this store created or dropped since (see the package comment).
func (s *Store) Len() int { return int(max(s.keyBase.Load()+s.keyDelta.Load(), 0)) }

// recount redoes Len's full count.
func (s *Store) recount(ctx context.Context) error {
	pattern := globPattern(s.prefix)
	if s.opts.DedicatedDB {
		pattern = ""
	}
	d0 := s.keyDelta.Load()
	n, err := s.c.countKeys(ctx, pattern)
	if err != nil {
		return err
	}
	s.keyBase.Store(n - d0)
	return nil
}

// run is the background loop: lease renewal, release of leases whose
// acquisition had an unknown outcome, health checks, counting.
func (s *Store) run() {
	defer close(s.done)
	renewEvery := s.opts.LeaseTTL / 3
	tick := min(time.Second, renewEvery)
	if s.opts.LenInterval > 0 {
		tick = min(tick, s.opts.LenInterval)
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	lastRenew, lastCount := time.Now(), time.Now()
	for {
		select {
		case <-s.bg.Done():
			return
		case now := <-t.C:
			s.checkMaster()
			if !s.healthy.Load() {
				ctx, cancel := context.WithTimeout(s.bg, s.opts.Deadline)
				if s.c.ping(ctx) == nil {
					s.healthy.Store(true)
					s.answered(false)
				}
				cancel()
			}
			if now.Sub(lastRenew) >= renewEvery {
				lastRenew = now
				s.renewAll()
			}
			s.releaseOrphans(now)
			s.prune(now)
			if s.opts.LenInterval > 0 && now.Sub(lastCount) >= s.opts.LenInterval {
				lastCount = now
				ctx, cancel := context.WithTimeout(s.bg, max(s.opts.LenInterval/2, time.Second))
				if err := s.recount(ctx); err != nil {
					s.warn("redis store: counting keys", err)
				}
				cancel()
			}
		}
	}
}

// checkMaster logs a switch of the master, with Sentinel.
func (s *Store) checkMaster() {
	if s.opts.MasterSet == "" {
		return
	}
	s.masterMu.Lock()
	defer s.masterMu.Unlock()
	if m := s.c.primary(); m != "" && m != s.master {
		s.log.Warn("redis store: the Sentinels switched the master; following it", "master_set", s.opts.MasterSet, "old", s.master, "new", m)
		s.master = m
	}
}

// warn logs a background failure, at most once every 10 seconds.
func (s *Store) warn(msg string, err error) {
	sec := time.Now().Unix()
	if old := s.warned.Load(); sec-old >= 10 && s.warned.CompareAndSwap(old, sec) {
		s.log.Warn(msg, "err", err, "addrs", s.opts.Addrs)
	}
}

// eval runs one script within the deadline and returns its reply and the
// local time it arrived. While the circuit breaker is open it fails at
// once, but for the probes.
func (s *Store) eval(parent context.Context, op string, sc *script, keys, args []string) ([]int64, time.Time, error) {
	ok, probe := s.brk.enter(time.Now())
	if !ok {
		s.errs.Add(1)
		return nil, time.Now(), fmt.Errorf("redis store: %s: %w", op, ErrCircuitOpen)
	}
	ctx, cancel := context.WithTimeout(parent, s.opts.Deadline)
	defer cancel()
	v, err := s.c.eval(ctx, sc, keys, args)
	t1 := time.Now()
	if err != nil {
		if parent.Err() != nil {
			// The caller gave up (its own deadline or cancellation):
			// nothing is known about Redis.
			s.brk.abandoned(probe)
			return nil, t1, fmt.Errorf("redis store: %s: %w", op, err)
		}
		if _, ok := serverError(err); ok {
			s.answered(probe)
		} else if s.brk.missed(probe, t1) {
			s.log.Warn("redis store: Redis missed its deadline on consecutive calls; circuit open: deciding by the fail mode at once, probing Redis at intervals",
				"misses", s.opts.BreakAfter, "deadline", s.opts.Deadline.String(), "probe_interval", s.opts.ProbeInterval.String(), "addrs", s.opts.Addrs, "err", err)
		}
		return nil, t1, s.fail(op, err)
	}
	s.answered(probe)
	s.healthy.Store(true)
	if s.failed.Load() && s.failed.Swap(false) {
		s.checkMaster()
	}
	return v, t1, nil
}

// answered tells the breaker that Redis answered, and logs the circuit's
// closing.
func (s *Store) answered(probe bool) {
	if s.brk.answered(probe) {
		s.log.Info("redis store: Redis answers again; circuit closed", "addrs", s.opts.Addrs, "decided_by_fail_mode", s.brk.fastFails.Load())
	}
}

func (s *Store) fail(op string, err error) error {
	s.errs.Add(1)
	if isOOM(err) {
		return fmt.Errorf("redis store: %s: %w: %w", op, limiter.ErrFull, err)
	}
	if _, ok := serverError(err); !ok {
		s.healthy.Store(false)
		s.failed.Store(true)
	}
	return fmt.Errorf("redis store: %s: %w", op, err)
}

func (s *Store) malformed(op string, v []int64) error {
	s.errs.Add(1)
	return fmt.Errorf("redis store: %s: unexpected reply %v", op, v)
}

// timeArgs appends ARGV[1] and ARGV[2]: now, or blanks for Redis TIME.
func (s *Store) timeArgs(now time.Time, args []string) ([]string, error) {
	if !s.opts.UseCallerTime {
		return append(args, "", ""), nil
	}
	if now.Unix() < 1 {
		return nil, fmt.Errorf("%w: time %v is before 1970", limiter.ErrBadRequest, now)
	}
	if ns := now.UnixNano(); ns > s.seenNow.Load() {
		s.seenNow.Store(ns)
		s.seenAt.Store(int64(time.Since(s.born)))
	}
	return append(args, strconv.FormatInt(now.Unix(), 10), strconv.Itoa(now.Nanosecond())), nil
}

// clock notes the server's time from a reply (with Redis TIME).
func (s *Store) clock(sec, nsec int64, arrived time.Time) {
	if !s.opts.UseCallerTime {
		// The script ran before the reply arrived: this is a lower bound.
		s.offset.Store(sec*int64(time.Second) + nsec - arrived.UnixNano())
	}
}

// serverTime turns a local time into the server's (a lower bound), with
// Redis TIME; with caller time it is the same.
func (s *Store) serverTime(t time.Time) int64 {
	ns := t.UnixNano()
	if !s.opts.UseCallerTime {
		ns += s.offset.Load()
	}
	return ns
}

// nowArgs is timeArgs for background work: with caller time, the latest
// time passed in, advanced by the time elapsed since.
func (s *Store) nowArgs(args []string) []string {
	if !s.opts.UseCallerTime {
		return append(args, "", "")
	}
	ns := s.seenNow.Load() + int64(time.Since(s.born)) - s.seenAt.Load()
	if ns < int64(time.Second) {
		ns = time.Now().UnixNano()
	}
	return append(args, strconv.FormatInt(ns/int64(time.Second), 10), strconv.FormatInt(ns%int64(time.Second), 10))
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
