package redis

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"sluice/internal/limiter"
	"sluice/internal/store/storetest"
)

// TestConformance holds the store to the suite every backend passes, on a
// real redis-server, with the suite's times (UseCallerTime).
func TestConformance(t *testing.T) {
	srv := needServer(t)
	storetest.Run(t, storetest.Backend{
		New: func(t *testing.T) limiter.Store {
			return &swept{Store: newTestStore(t, srv, Options{UseCallerTime: true}), t: t}
		},
		Capped: cappedStore,
	})
}

// capHeadroom is the memory a capped store may fill above what an empty
// server uses.
const capHeadroom = 256 << 10

// cappedStore is a store on a server of its own whose maxmemory leaves
// capHeadroom for keys: noeviction refuses writes (ErrFull), volatile-ttl
// evicts the keys nearest their expiry. A key of the suite's costs more
// than its CapKeyLen bytes of name, so fewer than capHeadroom/CapKeyLen
// fit.
func cappedStore(t *testing.T, evict bool) (limiter.Store, int) {
	srv := privateServer(t)
	return capStore(t, evict, newTestStore(t, srv, Options{UseCallerTime: true}), admin(t, srv))
}

// capStore caps the memory of the server adm administers, for s.
func capStore(t *testing.T, evict bool, s *Store, adm rueidis.Client) (limiter.Store, int) {
	info, err := adm.Do(ctx, adm.B().Info().Section("memory").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	var used int64
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			used, err = strconv.ParseInt(v, 10, 64)
		}
	}
	if used == 0 || err != nil {
		t.Fatalf("no used_memory in INFO memory (%v): %q", err, info)
	}
	policy := "noeviction"
	if evict {
		policy = "volatile-ttl"
	}
	for _, kv := range [][2]string{{"maxmemory-policy", policy}, {"maxmemory", strconv.FormatInt(used+capHeadroom, 10)}} {
		if err := adm.Do(ctx, adm.B().ConfigSet().ParameterValue().ParameterValue(kv[0], kv[1]).Build()).Error(); err != nil {
			t.Fatalf("CONFIG SET %s %s: %v", kv[0], kv[1], err)
		}
	}
	return &swept{Store: s, t: t}, capHeadroom / storetest.CapKeyLen
}

// swept gives the store the suite's Sweep. Redis expires a key by a TTL
// counted on its own clock from when the script that set it ran, while
// the suite's times are fake; so the wrapper notes, over every write, how
// far the wall clock after the call was ahead of the caller's time (lag),
// and Sweep(now) waits until the wall clock reaches now+lag, by when
// every key idle at now has expired, then counts the keys afresh (SCAN
// also reclaims expired keys).
type swept struct {
	*Store
	t   testing.TB
	lag atomic.Int64 // ns; 0 until the first write
}

func (w *swept) note(now time.Time) {
	d := time.Now().UnixNano() - now.UnixNano()
	for {
		old := w.lag.Load()
		if (old != 0 && d <= old) || w.lag.CompareAndSwap(old, d) {
			return
		}
	}
}

// Sweep implements storetest.Sweeper.
func (w *swept) Sweep(now time.Time) {
	if lag := w.lag.Load(); lag != 0 {
		// PEXPIRE rounds up to a millisecond, and Redis expires a key
		// once its clock is past that millisecond.
		time.Sleep(time.Until(now.Add(time.Duration(lag) + 2*time.Millisecond)))
	}
	if err := w.recount(ctx); err != nil {
		w.t.Errorf("counting keys: %v", err)
	}
}

func (w *swept) Hit(c context.Context, now time.Time, n int64, mode limiter.Mode, checks []limiter.Check, out []limiter.Decision) error {
	defer w.note(now)
	return w.Store.Hit(c, now, n, mode, checks, out)
}

func (w *swept) Undo(c context.Context, now, at time.Time, n int64, checks []limiter.Check) error {
	defer w.note(now)
	return w.Store.Undo(c, now, at, n, checks)
}

func (w *swept) Reserve(c context.Context, now time.Time, key string, lim limiter.Limit, n int64, maxWait time.Duration) (limiter.Reservation, error) {
	defer w.note(now)
	return w.Store.Reserve(c, now, key, lim, n, maxWait)
}

func (w *swept) Cancel(c context.Context, now time.Time, r limiter.Reservation) error {
	defer w.note(now)
	return w.Store.Cancel(c, now, r)
}

func (w *swept) Acquire(c context.Context, now time.Time, key string, capacity int64, ttl time.Duration) (limiter.Lease, int64, bool, error) {
	defer w.note(now)
	return w.Store.Acquire(c, now, key, capacity, ttl)
}

func (w *swept) Release(c context.Context, now time.Time, l limiter.Lease) (int64, error) {
	defer w.note(now)
	return w.Store.Release(c, now, l)
}
