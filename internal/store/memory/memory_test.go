package memory

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"

	"sluice/internal/clock"
	"sluice/internal/limiter"
	"sluice/internal/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backend gives the conformance suite stores of the given shard count;
// capped ones hold 64 keys.
func backend(shards int) storetest.Backend {
	return storetest.Backend{
		New: func(t *testing.T) limiter.Store { return New(Options{Shards: shards}) },
		Capped: func(t *testing.T, evict bool) (limiter.Store, int) {
			return New(Options{Shards: shards, MaxKeys: 64, Evict: evict, Logger: slog.New(slog.DiscardHandler)}), 64
		},
	}
}

func TestConformance(t *testing.T) { storetest.Run(t, backend(0)) }

func TestConformanceOneShard(t *testing.T) { storetest.Run(t, backend(1)) }

var t0 = storetest.T0

func anvilCheck(key string) limiter.Check {
	return limiter.Check{Key: key, Limit: limiter.Limit{Algorithm: limiter.Anvil, N: limiter.Unlimited, Period: time.Minute}}
}

func TestCapEvictsIdle(t *testing.T) {
	s := New(Options{MaxKeys: 100, Shards: 4, Evict: true})
	defer s.Close()
	out := make([]limiter.Decision, 1)
	// Hold a lease on some keys: they must never be evicted.
	var leases []limiter.Lease
	for i := range 20 {
		l, _, ok, err := s.Acquire(t.Context(), t0, fmt.Sprintf("lease-%d", i), 0, 0)
		if err != nil || !ok {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	for i := range 1000 {
		if err := s.Hit(t.Context(), t0, 1, limiter.Leaky, []limiter.Check{anvilCheck(fmt.Sprintf("k%d", i))}, out); err != nil {
			t.Fatalf("hit %d: %v", i, err)
		}
		if s.Len() > 100 {
			t.Fatalf("Len %d over cap", s.Len())
		}
	}
	if s.Evicted() == 0 {
		t.Fatal("nothing evicted")
	}
	for _, l := range leases {
		if held, _ := s.Held(t.Context(), t0, l.Key); held != 1 {
			t.Fatalf("lease key %s evicted", l.Key)
		}
	}
}

func TestCapRefuses(t *testing.T) {
	s := New(Options{MaxKeys: 8, Shards: 1})
	defer s.Close()
	out := make([]limiter.Decision, 1)
	for i := range 8 {
		if err := s.Hit(t.Context(), t0, 1, limiter.Leaky, []limiter.Check{anvilCheck(fmt.Sprint(i))}, out); err != nil {
			t.Fatal(err)
		}
	}
	err := s.Hit(t.Context(), t0, 1, limiter.Leaky, []limiter.Check{anvilCheck("new")}, out)
	if !errors.Is(err, limiter.ErrFull) {
		t.Fatalf("want ErrFull, got %v", err)
	}
	// Existing keys keep working, and expired keys make room.
	if err := s.Hit(t.Context(), t0, 1, limiter.Leaky, []limiter.Check{anvilCheck("3")}, out); err != nil {
		t.Fatal(err)
	}
	if err := s.Hit(t.Context(), t0.Add(2*time.Minute), 1, limiter.Leaky, []limiter.Check{anvilCheck("new")}, out); err != nil {
		t.Fatalf("expired keys should make room: %v", err)
	}
}

// TestMemoryPerKey reports the heap cost of one tracked anvil key (the
// README quotes it); it fails only if the figure is absurd, since the
// exact number depends on the Go version.
func TestMemoryPerKey(t *testing.T) {
	const n = 200_000
	s := New(Options{MaxKeys: n})
	defer s.Close()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("smtp:10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	out := make([]limiter.Decision, 1)
	for _, k := range keys {
		if err := s.Hit(t.Context(), t0, 1, limiter.Leaky, []limiter.Check{anvilCheck(k)}, out); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("memory per tracked anvil key: %.0f bytes (keys like %q)", per, keys[n-1])
	if per > 1000 {
		t.Errorf("%.0f bytes per key", per)
	}
	runtime.KeepAlive(keys)
}

// TestSweeper: the sweeper drops expired keys on its own, but never
// expires anything later than the latest time callers have used.
func TestSweeper(t *testing.T) {
	fc := clock.NewFake(t0)
	s := New(Options{Shards: 1, SweepInterval: time.Second, Clock: fc})
	defer s.Close()
	out := make([]limiter.Decision, 1)
	hit := func(key string, at time.Time) {
		if err := s.Hit(t.Context(), at, 1, limiter.Leaky, []limiter.Check{anvilCheck(key)}, out); err != nil {
			t.Fatal(err)
		}
	}
	hit("old", t0)
	sweep := func() {
		for fc.Timers() == 0 {
			time.Sleep(time.Millisecond)
		}
		fc.Advance(time.Second)
		for fc.Timers() == 0 { // the next timer is armed after the sweep
			time.Sleep(time.Millisecond)
		}
	}
	fc.Advance(5 * time.Minute) // the clock moves, callers' time does not
	sweep()
	if s.Len() != 1 {
		t.Fatalf("swept a key callers still see as live: Len %d", s.Len())
	}
	hit("new", t0.Add(5*time.Minute))
	sweep()
	if s.Len() != 1 {
		t.Fatalf("Len %d after sweep, want 1 (only the new key)", s.Len())
	}
}
