// Package storetest is the conformance suite every limiter.Store must pass:
// the same semantic cases (windows, exactness under concurrency,
// reservations, leases, expiry, the key cap, errors) run against each
// backend.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"sluice/internal/limiter"
)

// Sweeper is implemented by every store under the suite (directly, or by a
// test wrapper): Sweep(now) returns once every key idle at now has expired
// and Len counts only what is left. store/memory drops expired keys on
// demand; a store whose keys expire on a clock of its own (Redis TTLs) waits
// until that clock has passed now and counts its keys afresh.
type Sweeper interface {
	Sweep(now time.Time)
}

// T0 is the suite's starting time: a whole second, so anvil windows line up.
var T0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// CapKeyLen is about the length of the keys the key-cap cases write, so a
// store capped by memory (Redis maxmemory) can tell how many fit.
const CapKeyLen = 200

// Backend describes a store to the suite.
type Backend struct {
	// New returns a fresh store with default options. Its stores must
	// implement Sweeper.
	New func(t *testing.T) limiter.Store
	// Capped returns a fresh store that holds at most maxKeys keys of
	// about CapKeyLen bytes (one exact event each, or more), and at its
	// cap evicts idle keys (evict) or refuses new keys with
	// limiter.ErrFull. Its stores must implement Sweeper too.
	Capped func(t *testing.T, evict bool) (s limiter.Store, maxKeys int)
	// KeepsLiveKeys says the store, at its cap, drops only keys at rest
	// (nothing left in any window) and refuses a new key with
	// limiter.ErrFull rather than drop a key still counting, whatever
	// evict says (store/memory). The suite then checks that a flood of
	// new keys resets nobody's count, instead of CapEvictsIdleKeys.
	KeepsLiveKeys bool
}

// Run runs every case against stores made by b; each case gets a fresh
// store, which the suite closes.
func Run(t *testing.T, b Backend) {
	cases := []struct {
		name string
		fn   func(t *testing.T, s limiter.Store)
	}{
		{"AnvilWindow", testAnvilWindow},
		{"AnvilCountersShareWindow", testAnvilCounters},
		{"AnvilEdgeBurst", testAnvilEdgeBurst},
		{"ExactNeverExceeds", testExactNeverExceeds},
		{"ExactWindowEdge", testExactWindowEdge},
		{"ExactConcurrent", testExactConcurrent},
		{"SmoothBurstThenPace", testSmooth},
		{"LeakyAllOrNothing", testLeakyAllOrNothing},
		{"StrictCountsRefused", testStrict},
		{"Undo", testUndo},
		{"PeekChangesNothing", testPeek},
		{"ReserveFIFO", testReserveFIFO},
		{"ReserveMaxWaitAndCancel", testReserveMaxWait},
		{"ReserveConcurrentExact", testReserveConcurrent},
		{"Leases", testLeases},
		{"LeasesConcurrent", testLeasesConcurrent},
		{"LeaseTTL", testLeaseTTL},
		{"IdleKeysExpire", testExpiry},
		{"BadRequests", testBadRequests},
		{"ZeroHit", testZeroHit},
		{"KeysAndForget", testKeysAndForget},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := b.New(t)
			defer s.Close()
			c.fn(t, s)
		})
	}
	for _, c := range []struct {
		name  string
		evict bool
		fn    func(t *testing.T, s limiter.Store, maxKeys int)
	}{
		{"CapRefusesNewKeys", false, testCapRefuses},
		{"CapEvictsIdleKeys", true, testCapEvicts},
	} {
		if b.KeepsLiveKeys && c.evict {
			c.name, c.fn = "CapKeepsLiveKeys", testCapKeepsLive
		}
		t.Run(c.name, func(t *testing.T) {
			s, maxKeys := b.Capped(t, c.evict)
			defer s.Close()
			c.fn(t, s, maxKeys)
		})
	}
}

var ctx = context.Background()

func hit(t *testing.T, s limiter.Store, now time.Time, n int64, mode limiter.Mode, checks ...limiter.Check) []limiter.Decision {
	t.Helper()
	out := make([]limiter.Decision, len(checks))
	if err := s.Hit(ctx, now, n, mode, checks, out); err != nil {
		t.Fatalf("Hit: %v", err)
	}
	return out
}

func at(d time.Duration) time.Time { return T0.Add(d) }

func anvil(key string, n int64, period time.Duration, counter uint8) limiter.Check {
	return limiter.Check{Key: key, Counter: counter, Limit: limiter.Limit{Algorithm: limiter.Anvil, N: n, Period: period}}
}

func exact(key string, n int64, period time.Duration) limiter.Check {
	return limiter.Check{Key: key, Limit: limiter.Limit{Algorithm: limiter.Exact, N: n, Period: period}}
}

func testAnvilWindow(t *testing.T, s limiter.Store) {
	c := anvil("a", 3, 60*time.Second, 0)
	for i := int64(1); i <= 3; i++ {
		d := hit(t, s, at(time.Duration(i)*time.Second), 1, limiter.Leaky, c)[0]
		if !d.Allowed || d.Count != i || d.Remaining != 3-i {
			t.Fatalf("hit %d: %+v", i, d)
		}
	}
	d := hit(t, s, at(30*time.Second), 1, limiter.Leaky, c)[0]
	if d.Allowed || d.Count != 3 || d.RetryAfter <= 0 {
		t.Fatalf("4th hit should be refused with a retry time: %+v", d)
	}
	// anvil: the window started at t=1s; it is stale once start+60 < now,
	// in whole seconds: still current at 61s, reset at 62s.
	if d := hit(t, s, at(61*time.Second+900*time.Millisecond), 1, limiter.Leaky, c)[0]; d.Allowed {
		t.Fatalf("window should still be full at 61.9s: %+v", d)
	}
	if d := hit(t, s, at(62*time.Second), 1, limiter.Leaky, c)[0]; !d.Allowed || d.Count != 1 {
		t.Fatalf("window should restart at 62s: %+v", d)
	}
}

func testAnvilCounters(t *testing.T, s limiter.Store) {
	conn := anvil("k", limiter.Unlimited, 60*time.Second, 0)
	mail := anvil("k", limiter.Unlimited, 60*time.Second, 1)
	hit(t, s, at(0), 1, limiter.Leaky, conn)
	hit(t, s, at(50*time.Second), 1, limiter.Leaky, mail)
	// At 61s the window (anchored at 0) is stale; the mail counter
	// restarts with it, as anvil resets all rates of an entry together.
	if d := hit(t, s, at(61*time.Second), 1, limiter.Leaky, mail)[0]; d.Count != 1 {
		t.Fatalf("mail counter should restart with the shared window: %+v", d)
	}
	out := make([]limiter.Decision, 2)
	if err := s.Peek(ctx, at(62*time.Second), 0, []limiter.Check{conn, mail}, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Count != 0 || out[1].Count != 1 {
		t.Fatalf("peek after reset: conn %d mail %d, want 0 1", out[0].Count, out[1].Count)
	}
}

func testAnvilEdgeBurst(t *testing.T, s limiter.Store) {
	// The documented weakness of anvil windows: 2N in just over one period.
	c := anvil("e", 5, 10*time.Second, 0)
	admitted := 0
	for _, tm := range []time.Duration{0, 10 * time.Second} {
		for range 5 {
			if hit(t, s, at(tm), 1, limiter.Leaky, c)[0].Allowed {
				admitted++
			}
		}
	}
	if d := hit(t, s, at(11*time.Second), 1, limiter.Leaky, c)[0]; !d.Allowed {
		t.Fatalf("window anchored at 0 must restart at 11s")
	}
	if admitted != 5 {
		t.Fatalf("within one window: admitted %d, want 5", admitted)
	}
}

// exactModel checks "never more than n in any window of period" over a
// list of admitted times.
func exactModel(times []time.Time, n int, period time.Duration) error {
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	for i := range times {
		if j := i + n; j < len(times) && times[j].Sub(times[i]) < period {
			return fmt.Errorf("%d events within %s (from %s to %s)", n+1, times[j].Sub(times[i]), times[i].Sub(T0), times[j].Sub(T0))
		}
	}
	return nil
}

func testExactNeverExceeds(t *testing.T, s limiter.Store) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := exact("x", 7, 5*time.Second)
	var admitted []time.Time
	now := T0
	for range 2000 {
		now = now.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
		n := int64(1 + rng.IntN(2))
		if d := hit(t, s, now, n, limiter.Leaky, c)[0]; d.Allowed {
			for range n {
				admitted = append(admitted, now)
			}
		} else if d.RetryAfter <= 0 {
			t.Fatalf("refused without retry time: %+v", d)
		}
	}
	if err := exactModel(admitted, 7, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// About 400 s of traffic at 7 per 5 s allows at most 560.
	if len(admitted) < 450 {
		t.Fatalf("only %d admitted: the limit is too strict", len(admitted))
	}
}

func testExactWindowEdge(t *testing.T, s limiter.Store) {
	// 10 per 6 s; 1 at 0 s, 9 at 5.3 s, 10 at 6.3 s. At 6.3 s the window
	// (0.3 s, 6.3 s] holds 9, so exactly one more is admitted: never more
	// than 10 in any 6 s, where a fixed window would admit 20.
	c := exact("edge", 10, 6*time.Second)
	count := func(tm time.Duration, k int) int {
		got := 0
		for range k {
			if hit(t, s, at(tm), 1, limiter.Leaky, c)[0].Allowed {
				got++
			}
		}
		return got
	}
	a := count(0, 1)
	b := count(5300*time.Millisecond, 9)
	d := count(6300*time.Millisecond, 10)
	if a != 1 || b != 9 || d != 1 {
		t.Fatalf("admitted %d, %d, %d; want 1, 9, 1", a, b, d)
	}
	// The next free slot comes when the 5.3 s events leave the window,
	// at 11.3 s.
	if dec := hit(t, s, at(6300*time.Millisecond), 1, limiter.Leaky, c)[0]; dec.RetryAfter != 5*time.Second {
		t.Fatalf("retry after %s, want 5s", dec.RetryAfter)
	}
}

func testExactConcurrent(t *testing.T, s limiter.Store) {
	for _, workers := range []int{1, 8, 64} {
		c := exact(fmt.Sprintf("conc-%d", workers), 10, time.Minute)
		var mu sync.Mutex
		admitted := 0
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 100 / workers {
					out := make([]limiter.Decision, 1)
					now := at(time.Duration(w*7+i) * time.Millisecond)
					if err := s.Hit(ctx, now, 1, limiter.Leaky, []limiter.Check{c}, out); err != nil {
						t.Error(err)
						return
					}
					if out[0].Allowed {
						mu.Lock()
						admitted++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		if admitted != 10 {
			t.Errorf("c=%d: admitted %d, want exactly 10", workers, admitted)
		}
	}
}

func testSmooth(t *testing.T, s limiter.Store) {
	c := limiter.Check{Key: "s", Limit: limiter.Limit{Algorithm: limiter.Smooth, N: 10, Period: 10 * time.Second, Burst: 3}}
	for i := range 3 {
		if d := hit(t, s, at(0), 1, limiter.Leaky, c)[0]; !d.Allowed {
			t.Fatalf("burst hit %d refused: %+v", i, d)
		}
	}
	d := hit(t, s, at(0), 1, limiter.Leaky, c)[0]
	if d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("4th hit: %+v, want refused with retry 1s", d)
	}
	if d := hit(t, s, at(time.Second), 1, limiter.Leaky, c)[0]; !d.Allowed {
		t.Fatalf("after one interval: %+v", d)
	}
	if d := hit(t, s, at(time.Second), 1, limiter.Leaky, c)[0]; d.Allowed {
		t.Fatalf("second in the same interval: %+v", d)
	}
	// Sustained: over 100 s at one attempt per 100 ms, about N/Period*100s
	// + burst are admitted.
	admitted := 0
	for i := range 1000 {
		if hit(t, s, at(2*time.Second+time.Duration(i)*100*time.Millisecond), 1, limiter.Leaky, c)[0].Allowed {
			admitted++
		}
	}
	if admitted < 100 || admitted > 103 {
		t.Fatalf("sustained admitted %d, want 100..103", admitted)
	}
	if d := hit(t, s, at(300*time.Second), 4, limiter.Leaky, c)[0]; d.Allowed || d.RetryAfter != limiter.Never {
		t.Fatalf("n > burst must never pass: %+v", d)
	}
}

func testLeakyAllOrNothing(t *testing.T, s limiter.Store) {
	wide := exact("wide", 100, time.Minute)
	narrow := exact("narrow", 2, time.Minute)
	hit(t, s, at(0), 2, limiter.Leaky, narrow)
	out := hit(t, s, at(time.Second), 1, limiter.Leaky, wide, narrow)
	if !out[0].Allowed || out[1].Allowed {
		t.Fatalf("decisions %+v", out)
	}
	pk := make([]limiter.Decision, 1)
	if err := s.Peek(ctx, at(2*time.Second), 0, []limiter.Check{wide}, pk); err != nil {
		t.Fatal(err)
	}
	if pk[0].Count != 0 {
		t.Fatalf("leaky refusal counted on the other limit: count %d", pk[0].Count)
	}
}

func testStrict(t *testing.T, s limiter.Store) {
	for _, c := range []limiter.Check{anvil("sa", 2, 60*time.Second, 0), exact("se", 2, time.Minute)} {
		for range 4 {
			hit(t, s, at(0), 1, limiter.Strict, c)
		}
		d := hit(t, s, at(time.Second), 1, limiter.Leaky, c)[0]
		if d.Allowed {
			t.Fatalf("%s: strict refusals must keep the key over the limit", c.Limit)
		}
		if c.Limit.Algorithm == limiter.Anvil && d.Count != 4 {
			t.Fatalf("anvil strict count %d, want 4", d.Count)
		}
	}
}

func testUndo(t *testing.T, s limiter.Store) {
	for _, c := range []limiter.Check{
		anvil("ua", 2, 60*time.Second, 0),
		exact("ue", 2, time.Minute),
		{Key: "us", Limit: limiter.Limit{Algorithm: limiter.Smooth, N: 2, Period: time.Minute}},
	} {
		hit(t, s, at(0), 1, limiter.Leaky, c)
		hit(t, s, at(time.Second), 1, limiter.Leaky, c)
		if hit(t, s, at(2*time.Second), 1, limiter.Leaky, c)[0].Allowed {
			t.Fatalf("%s: third hit allowed", c.Limit)
		}
		if err := s.Undo(ctx, at(3*time.Second), at(time.Second), 1, []limiter.Check{c}); err != nil {
			t.Fatal(err)
		}
		if d := hit(t, s, at(3*time.Second), 1, limiter.Leaky, c)[0]; !d.Allowed {
			t.Fatalf("%s: after undo the slot must be free: %+v", c.Limit, d)
		}
	}
}

func testPeek(t *testing.T, s limiter.Store) {
	c := exact("p", 1, time.Minute)
	out := make([]limiter.Decision, 1)
	for range 3 {
		if err := s.Peek(ctx, at(0), 1, []limiter.Check{c}, out); err != nil || !out[0].Allowed || out[0].Count != 0 {
			t.Fatalf("peek: %+v %v", out[0], err)
		}
	}
	if d := hit(t, s, at(0), 1, limiter.Leaky, c)[0]; !d.Allowed {
		t.Fatal("peek consumed the slot")
	}
}

func testReserveFIFO(t *testing.T, s limiter.Store) {
	lim := limiter.Limit{Algorithm: limiter.Exact, N: 2, Period: 10 * time.Second}
	var got []time.Duration
	for range 5 {
		r, err := s.Reserve(ctx, at(0), "r", lim, 1, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.At.Sub(T0))
	}
	want := []time.Duration{0, 0, 10 * time.Second, 10 * time.Second, 20 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("slots %v, want %v", got, want)
	}
	// No queue jumping: an instant hit while reservations wait is refused
	// until the queue is served.
	c := limiter.Check{Key: "r", Limit: lim}
	// The slots at 10 s have left the window (10 s, 20 s] by 20 s, where
	// the one reservation at 20 s leaves room for one more.
	if d := hit(t, s, at(5*time.Second), 1, limiter.Leaky, c)[0]; d.Allowed || d.RetryAfter != 15*time.Second {
		t.Fatalf("hit during queue: %+v, want refused until 20s", d)
	}
}

func testReserveMaxWait(t *testing.T, s limiter.Store) {
	lim := limiter.Limit{Algorithm: limiter.Exact, N: 1, Period: 10 * time.Second}
	r1, err := s.Reserve(ctx, at(0), "m", lim, 1, 0)
	if err != nil || !r1.At.Equal(T0) {
		t.Fatalf("first: %v %v", r1, err)
	}
	r2, err := s.Reserve(ctx, at(0), "m", lim, 1, 15*time.Second)
	if err != nil || r2.At.Sub(T0) != 10*time.Second {
		t.Fatalf("second: %v %v", r2, err)
	}
	r3, err := s.Reserve(ctx, at(0), "m", lim, 1, 15*time.Second)
	if !errors.Is(err, limiter.ErrTooLong) || r3.At.Sub(T0) != 20*time.Second {
		t.Fatalf("third should be refused as too long (slot 20s): %v %v", r3.At.Sub(T0), err)
	}
	// The refused reservation booked nothing; cancelling r2 frees 10s.
	if err := s.Cancel(ctx, at(time.Second), r2); err != nil {
		t.Fatal(err)
	}
	r4, err := s.Reserve(ctx, at(time.Second), "m", lim, 1, time.Minute)
	if err != nil || r4.At.Sub(T0) != 10*time.Second {
		t.Fatalf("after cancel: %v %v", r4.At.Sub(T0), err)
	}
	if _, err := s.Reserve(ctx, at(0), "m", lim, 2, time.Hour); !errors.Is(err, limiter.ErrTooLong) {
		t.Fatalf("n > N must be refused: %v", err)
	}
}

func testReserveConcurrent(t *testing.T, s limiter.Store) {
	lim := limiter.Limit{Algorithm: limiter.Exact, N: 5, Period: time.Second}
	var mu sync.Mutex
	var times []time.Time
	var wg sync.WaitGroup
	for w := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.Reserve(ctx, at(time.Duration(w)*time.Millisecond), "rc", lim, 1, time.Hour)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			times = append(times, r.At)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err := exactModel(times, 5, time.Second); err != nil {
		t.Fatal(err)
	}
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	if last := times[len(times)-1].Sub(T0); last > 10*time.Second {
		t.Fatalf("50 slots at 5/s should end by about 9s, last at %s", last)
	}
}

func testBadRequests(t *testing.T, s limiter.Store) {
	out := make([]limiter.Decision, 1)
	bad := []limiter.Check{
		{Key: "b", Counter: 1, Limit: limiter.Limit{Algorithm: limiter.Exact, N: 1, Period: time.Second}},
		{Key: "b", Limit: limiter.Limit{Algorithm: limiter.Exact, N: 0, Period: time.Second}},
		{Key: "b", Counter: limiter.MaxCounters, Limit: limiter.Limit{Algorithm: limiter.Anvil, N: 1, Period: time.Second}},
		{Key: "b", Limit: limiter.Limit{Algorithm: limiter.Anvil, N: 1, Period: 1500 * time.Millisecond}},
	}
	for _, c := range bad {
		if err := s.Hit(ctx, at(0), 1, limiter.Leaky, []limiter.Check{c}, out); !errors.Is(err, limiter.ErrBadRequest) {
			t.Errorf("Hit(%+v) = %v, want ErrBadRequest", c, err)
		}
	}
	if _, err := s.Reserve(ctx, at(0), "b", limiter.Limit{Algorithm: limiter.Smooth, N: 1, Period: time.Second}, 1, 0); !errors.Is(err, limiter.ErrBadRequest) {
		t.Errorf("Reserve on smooth: %v", err)
	}
}

// testZeroHit: a hit of no events reports the state and changes nothing,
// on empty keys too.
func testZeroHit(t *testing.T, s limiter.Store) {
	for _, c := range []limiter.Check{
		anvil("z-a", 2, 60*time.Second, 0),
		exact("z-e", 2, time.Minute),
		{Key: "z-s", Limit: limiter.Limit{Algorithm: limiter.Smooth, N: 2, Period: time.Minute}},
	} {
		for _, mode := range []limiter.Mode{limiter.Leaky, limiter.Strict} {
			if d := hit(t, s, at(0), 0, mode, c)[0]; !d.Allowed || d.Count != 0 {
				t.Fatalf("%s: zero hit on an empty key: %+v", c.Limit, d)
			}
		}
		hit(t, s, at(time.Second), 1, limiter.Leaky, c)
		if d := hit(t, s, at(2*time.Second), 0, limiter.Strict, c)[0]; !d.Allowed || d.Count != 1 {
			t.Fatalf("%s: zero hit after one event: %+v", c.Limit, d)
		}
	}
}
