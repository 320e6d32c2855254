package limiter

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/clock"
)

// Options configure a Limiter.
type Options struct {
	// Store keeps the counts (memory or Redis).
	Store Store
	// Clock gives the time of every decision (default the real clock).
	Clock clock.Clock
	// FailOpen admits a hit the store cannot record (full, or failing);
	// otherwise such a hit is refused. Either way a warning is logged.
	FailOpen bool
	// Logger gets warnings and the peak reports (default slog.Default()).
	Logger *slog.Logger
	// KeyText renders a store key for the peak reports as people read it
	// (default: its parts joined by ", "); the layer that makes the keys
	// knows their shapes.
	KeyText func(key string) string
}

// Limiter is the front of the limiter core: it takes the time from its
// clock, applies the fail mode to store errors and tracks peak figures.
type Limiter struct {
	store    Store
	clk      clock.Clock
	failOpen bool
	log      *slog.Logger
	keyText  func(string) string
	peaks    Peaks
	warned   atomic.Int64 // Unix second of the last store-error warning
	failing  atomic.Int64 // store errors since the last success
}

// New returns a Limiter over o.Store.
func New(o Options) *Limiter {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.KeyText == nil {
		o.KeyText = func(k string) string { return strings.ReplaceAll(k, "\x00", ", ") }
	}
	return &Limiter{store: o.Store, clk: o.Clock, failOpen: o.FailOpen, log: o.Logger, keyText: o.KeyText}
}

// Now returns the limiter clock's time.
func (l *Limiter) Now() time.Time { return l.clk.Now() }

// Clock returns the limiter's clock.
func (l *Limiter) Clock() clock.Clock { return l.clk }

// Hit records n events against checks now (see Store.Hit). When the store
// cannot decide, every decision follows the fail mode and the error is
// returned for the caller to log or count; decisions are filled either way.
func (l *Limiter) Hit(ctx context.Context, n int64, mode Mode, checks []Check, out []Decision) error {
	now := l.clk.Now()
	err := l.store.Hit(ctx, now, n, mode, checks, out)
	if err != nil {
		if errors.Is(err, ErrBadRequest) {
			return err
		}
		l.storeFailed(now, err)
		for i := range checks {
			out[i] = Decision{Allowed: l.failOpen}
		}
		return err
	}
	l.storeOK()
	size := int64(l.store.Len())
	for i, c := range checks {
		l.peaks.observe(c.Stat, "rate", c.Key, out[i].Count, c.Limit.Period, now)
	}
	l.peaks.observeSize(size, now)
	return nil
}

// Peek returns the decisions a hit of n would get, changing nothing.
func (l *Limiter) Peek(ctx context.Context, n int64, checks []Check, out []Decision) error {
	return l.store.Peek(ctx, l.clk.Now(), n, checks, out)
}

// Undo takes back n events that a Hit at time at recorded.
func (l *Limiter) Undo(ctx context.Context, at time.Time, n int64, checks []Check) error {
	return l.store.Undo(ctx, l.clk.Now(), at, n, checks)
}

// Reserve books n events under an Exact limit (see Store.Reserve).
func (l *Limiter) Reserve(ctx context.Context, key string, lim Limit, n int64, maxWait time.Duration) (Reservation, error) {
	return l.store.Reserve(ctx, l.clk.Now(), key, lim, n, maxWait)
}

// Cancel gives back a reservation whose time has not come.
func (l *Limiter) Cancel(ctx context.Context, r Reservation) error {
	return l.store.Cancel(ctx, l.clk.Now(), r)
}

// Acquire takes a concurrency slot (see Store.Acquire). stat names the
// figure for peak logging ("connection count"). When the store fails, ok
// follows the fail mode and the lease is the zero Lease.
func (l *Limiter) Acquire(ctx context.Context, key string, capacity int64, ttl time.Duration, stat string) (Lease, int64, bool, error) {
	now := l.clk.Now()
	lease, held, ok, err := l.store.Acquire(ctx, now, key, capacity, ttl)
	if err != nil {
		l.storeFailed(now, err)
		return Lease{}, 0, l.failOpen, err
	}
	l.storeOK()
	l.peaks.observe(stat, "count", key, held, 0, now)
	l.peaks.observeSize(int64(l.store.Len()), now)
	return lease, held, ok, nil
}

// Release ends a lease; the zero Lease is ignored.
func (l *Limiter) Release(ctx context.Context, lease Lease) (int64, error) {
	if lease.ID == 0 {
		return 0, nil
	}
	return l.store.Release(ctx, l.clk.Now(), lease)
}

// Held returns how many leases key holds.
func (l *Limiter) Held(ctx context.Context, key string) (int64, error) {
	return l.store.Held(ctx, l.clk.Now(), key)
}

// FailOpen reports whether decisions the store cannot make are admitted.
func (l *Limiter) FailOpen() bool { return l.failOpen }

// Healthy reports whether the store's last decision succeeded.
func (l *Limiter) Healthy() bool { return l.failing.Load() == 0 }

// storeOK notes a decision the store made; the first after failures is
// logged.
func (l *Limiter) storeOK() {
	if n := l.failing.Load(); n > 0 && l.failing.CompareAndSwap(n, 0) {
		l.log.Info("limiter store recovered", "failed_decisions", n)
	}
}

// storeFailed logs a store failure at most once a second.
func (l *Limiter) storeFailed(now time.Time, err error) {
	l.failing.Add(1)
	sec := now.Unix()
	if old := l.warned.Load(); old != sec && l.warned.CompareAndSwap(old, sec) {
		mode := "refusing"
		if l.failOpen {
			mode = "admitting"
		}
		l.log.Warn("limiter store cannot decide; "+mode+" per the fail mode", "err", err, "store_keys", l.store.Len())
	}
}

// RunStatus logs and resets the peak figures every interval, and once more
// when ctx ends, as anvil(8) does every anvil_status_update_time.
func (l *Limiter) RunStatus(ctx context.Context, interval time.Duration) {
	for {
		t := l.clk.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			l.peaks.Report(l.log, l.keyText)
			return
		case <-t.C():
			l.peaks.Report(l.log, l.keyText)
		}
	}
}

// Peak is the largest value of one figure since the last report.
type Peak struct {
	Stat  string        // the figure ("connection rate", "class sessions"...)
	Value int64         // its largest value
	Key   string        // the key that reached it
	Per   time.Duration // the window of a rate; 0 for counts and sizes
	When  time.Time     // when
}

// Peaks tracks peak figures. The fast path (no new peak) is one atomic load.
type Peaks struct {
	m sync.Map // stat name -> *peakCell
	// last is the cell offered to last: a door's figure is offered again
	// and again, and comparing its name costs less than hashing it.
	last atomic.Pointer[peakCell]
	size peakCell
}

// peakCell holds one figure's peak.
type peakCell struct {
	stat string // the figure's name, set when made
	max  atomic.Int64
	mu   sync.Mutex
	p    Peak
}

// offer makes p the peak if its value is higher.
func (c *peakCell) offer(p Peak) {
	if p.Value <= c.max.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.Value > c.p.Value {
		c.p = p
		c.max.Store(p.Value)
	}
}

// take returns the peak and resets it.
func (c *peakCell) take() Peak {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.p
	c.p = Peak{}
	c.max.Store(0)
	return p
}

func (ps *Peaks) observe(stat, def, key string, v int64, per time.Duration, now time.Time) {
	if v <= 0 {
		return
	}
	if stat == "" {
		stat = def
	}
	c := ps.last.Load()
	if c == nil || c.stat != stat {
		ci, ok := ps.m.Load(stat)
		if !ok {
			ci, _ = ps.m.LoadOrStore(stat, &peakCell{stat: stat})
		}
		c = ci.(*peakCell)
		ps.last.Store(c)
	}
	c.offer(Peak{Stat: stat, Value: v, Key: key, Per: per, When: now})
}

func (ps *Peaks) observeSize(n int64, now time.Time) {
	ps.size.offer(Peak{Stat: "table size", Value: n, When: now})
}

// each calls f with every figure's cell, the table size's last.
func (ps *Peaks) each(f func(*peakCell)) {
	ps.m.Range(func(_, ci any) bool {
		f(ci.(*peakCell))
		return true
	})
	f(&ps.size)
}

// Report logs every peak in anvil's words, each key as keyText renders
// it, and resets them.
func (ps *Peaks) Report(log *slog.Logger, keyText func(string) string) {
	ps.each(func(c *peakCell) {
		if p := c.take(); p.Value > 0 {
			logPeak(log, p, keyText)
		}
	})
}

func logPeak(log *slog.Logger, p Peak, keyText func(string) string) {
	when := p.When.Format(time.Stamp)
	switch {
	case p.Per > 0:
		log.Info("statistics: max "+p.Stat, "value", p.Value, "per", p.Per.String(), "key", keyText(p.Key), "at", when)
	case p.Key != "":
		log.Info("statistics: max "+p.Stat, "value", p.Value, "key", keyText(p.Key), "at", when)
	default:
		log.Info("statistics: max "+p.Stat, "value", p.Value, "at", when)
	}
}

// Keys lists up to max keys held under prefix (see Store.Keys).
func (l *Limiter) Keys(ctx context.Context, prefix string, max int) ([]string, error) {
	return l.store.Keys(ctx, l.clk.Now(), prefix, max)
}

// Forget drops keys' state (see Store.Forget) and returns how many held any.
func (l *Limiter) Forget(ctx context.Context, keys []string) (int, error) {
	return l.store.Forget(ctx, l.clk.Now(), keys)
}
