package memory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"sluice/internal/clock"
	"sluice/internal/limiter"
	"sluice/internal/store/storetest"
	"sluice/internal/testutil/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backend gives the conformance suite stores of the given shard count;
// capped ones hold 64 keys.
func backend(shards int) storetest.Backend {
	return storetest.Backend{
		New: func(t *testing.T) limiter.Store { return New(Options{Shards: shards}) },
		Capped: func(t *testing.T, evict bool) (limiter.Store, int) {
			return New(Options{Shards: shards, MaxKeys: 64, Logger: slog.New(slog.DiscardHandler)}), 64
		},
		KeepsLiveKeys: true,
	}
}

func TestConformance(t *testing.T) { storetest.Run(t, backend(0)) }

func TestConformanceOneShard(t *testing.T) { storetest.Run(t, backend(1)) }

var t0 = storetest.T0

func anvilCheck(key string) limiter.Check {
	return limiter.Check{Key: key, Limit: limiter.Limit{Algorithm: limiter.Anvil, N: limiter.Unlimited, Period: time.Minute}}
}

// TestCapReclaimsOnlyAtRest: at the cap, keys still counting and keys
// holding leases are kept and a new key gets ErrFull (counted); once keys
// are at rest they make room.
func TestCapReclaimsOnlyAtRest(t *testing.T) {
	s := New(Options{MaxKeys: 100, Shards: 4, Logger: slog.New(slog.DiscardHandler)})
	defer s.Close()
	out := make([]limiter.Decision, 1)
	var leases []limiter.Lease
	for i := range 20 {
		l, _, ok, err := s.Acquire(t.Context(), t0, fmt.Sprintf("lease-%d", i), 0, 0)
		if err != nil || !ok {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	for i := range 80 {
		if err := s.Hit(t.Context(), t0, 1, limiter.Leaky, []limiter.Check{anvilCheck(fmt.Sprintf("k%d", i))}, out); err != nil {
			t.Fatalf("hit %d: %v", i, err)
		}
	}
	for i := range 50 {
		if err := s.Hit(t.Context(), t0.Add(time.Second), 1, limiter.Leaky, []limiter.Check{anvilCheck(fmt.Sprintf("new%d", i))}, out); !errors.Is(err, limiter.ErrFull) {
			t.Fatalf("new key %d at the cap with every key counting: %v, want ErrFull", i, err)
		}
	}
	if s.Refused() != 50 || s.Reclaimed() != 0 || s.Len() != 100 {
		t.Fatalf("refused %d, reclaimed %d, Len %d; want 50, 0, 100", s.Refused(), s.Reclaimed(), s.Len())
	}
	// The anvil windows are stale two minutes on: room for 80 new keys.
	later := t0.Add(2 * time.Minute)
	for i := range 80 {
		if err := s.Hit(t.Context(), later, 1, limiter.Leaky, []limiter.Check{anvilCheck(fmt.Sprintf("late%d", i))}, out); err != nil {
			t.Fatalf("new key %d once the old ones are at rest: %v", i, err)
		}
	}
	if s.Reclaimed() != 80 || s.Len() != 100 {
		t.Fatalf("reclaimed %d, Len %d; want 80, 100", s.Reclaimed(), s.Len())
	}
	for _, l := range leases {
		if held, _ := s.Held(t.Context(), later, l.Key); held != 1 {
			t.Fatalf("lease key %s dropped", l.Key)
		}
	}
}

// TestFloodKeepsCount is the flood: max_keys 1000, a sender at 10
// of 10/1h exact is refused; 5,000 new senders within the hour change
// nothing for it, their refusals are counted and logged once per
// interval.
func TestFloodKeepsCount(t *testing.T) {
	var logs countHandler
	s := New(Options{MaxKeys: 1000, Logger: slog.New(&logs), FullLogInterval: time.Minute})
	defer s.Close()
	lim := limiter.Limit{Algorithm: limiter.Exact, N: 10, Period: time.Hour}
	first := []limiter.Check{{Key: "policy\x00{sender\x00first@example.org}\x000", Limit: lim}}
	out := make([]limiter.Decision, 1)
	for i := range 10 {
		if err := s.Hit(t.Context(), t0.Add(time.Duration(i)*time.Second), 1, limiter.Leaky, first, out); err != nil || !out[0].Allowed {
			t.Fatalf("event %d: %+v %v", i, out[0], err)
		}
	}
	full := 0
	for i := range 5000 {
		now := t0.Add(time.Minute + time.Duration(i)*10*time.Millisecond) // 50 s of flood
		c := []limiter.Check{{Key: fmt.Sprintf("policy\x00{sender\x00forged%d@example.net}\x000", i), Limit: lim}}
		if err := s.Hit(t.Context(), now, 1, limiter.Leaky, c, out); errors.Is(err, limiter.ErrFull) {
			full++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if full != 5000-999 || s.Refused() != uint64(full) {
		t.Fatalf("%d new senders refused as full (counted %d), want %d", full, s.Refused(), 5000-999)
	}
	if n := logs.n.Load(); n != 1 {
		t.Fatalf("%d log lines about the full store in 50 s, want 1", n)
	}
	if err := s.Hit(t.Context(), t0.Add(2*time.Minute), 1, limiter.Leaky, first, out); err != nil || out[0].Allowed || out[0].Count != 10 {
		t.Fatalf("first sender after the flood: %+v %v, want refused at 10", out[0], err)
	}
	c := []limiter.Check{{Key: "late", Limit: lim}}
	if err := s.Hit(t.Context(), t0.Add(3*time.Minute), 1, limiter.Leaky, c, out); !errors.Is(err, limiter.ErrFull) {
		t.Fatal(err)
	}
	if n := logs.n.Load(); n != 2 {
		t.Fatalf("%d log lines after another interval, want 2", n)
	}
}

// countHandler counts the records logged.
type countHandler struct{ n atomic.Int64 }

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) Handle(context.Context, slog.Record) error {
	h.n.Add(1)
	return nil
}
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countHandler) WithGroup(string) slog.Handler      { return h }

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

// TestMemoryPerKey: a key costs the Go heap nothing (its record, index
// slot and key bytes live in the store's mappings, outside the heap), and
// the mappings hold at most 144 bytes per key of about 40 bytes. The
// resident figures are bench/memkeys's.
func TestMemoryPerKey(t *testing.T) {
	const n = 200_000
	for _, lim := range []limiter.Limit{
		{Algorithm: limiter.Exact, N: 10, Period: time.Hour},
		{Algorithm: limiter.Smooth, N: 10, Period: time.Hour},
		{Algorithm: limiter.Anvil, N: 10, Period: time.Hour},
	} {
		s := New(Options{MaxKeys: n})
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		out := make([]limiter.Decision, 1)
		c := []limiter.Check{{Limit: lim}}
		var buf []byte
		for i := range n {
			buf = fmt.Appendf(buf[:0], "policy\x00{sender\x00s%d@sender.example}\x000", 10_000_000+i)
			c[0].Key = string(buf)
			if err := s.Hit(t.Context(), t0, 1, limiter.Leaky, c, out); err != nil {
				t.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		heap := (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / n
		mapped := float64(s.InUse()) / n
		t.Logf("%s: Go heap %.1f B per key, mappings in use %.1f B per key", lim.Algorithm, heap, mapped)
		if heap > 4 || mapped > 144 {
			t.Errorf("%s: %.1f B of Go heap and %.1f B of mappings per key", lim.Algorithm, heap, mapped)
		}
		s.Close()
	}
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
		wait.For(t, func() bool { return fc.Timers() > 0 }, "the sweeper's timer")
		fc.Advance(time.Second)
		wait.For(t, func() bool { return fc.Timers() > 0 }, "the next sweep's timer (armed after the sweep)")
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

// TestReserveAtCap: at the cap a booking that would wait too long is
// answered ErrTooLong (nothing to store), one that fits ErrFull when every
// key is still counting; once keys are at rest, the booking is made where
// a key at rest was, and holds.
func TestReserveAtCap(t *testing.T) {
	s := New(Options{MaxKeys: 4, Shards: 1, Logger: slog.New(slog.DiscardHandler)})
	defer s.Close()
	lim := limiter.Limit{Algorithm: limiter.Exact, N: 1, Period: time.Minute}
	out := make([]limiter.Decision, 1)
	for i := range 4 {
		if err := s.Hit(t.Context(), t0, 1, limiter.Leaky, []limiter.Check{{Key: fmt.Sprint(i), Limit: lim}}, out); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Reserve(t.Context(), t0, "new", lim, 2, time.Hour); !errors.Is(err, limiter.ErrTooLong) {
		t.Fatalf("a booking that never fits, at the cap: %v, want ErrTooLong", err)
	}
	if _, err := s.Reserve(t.Context(), t0, "new", lim, 1, time.Hour); !errors.Is(err, limiter.ErrFull) {
		t.Fatalf("a booking at the cap of live keys: %v, want ErrFull", err)
	}
	later := t0.Add(2 * time.Minute) // every key at rest
	for i := range 2 {
		r, err := s.Reserve(t.Context(), later, "new", lim, 1, time.Hour)
		if want := later.Add(time.Duration(i) * time.Minute); err != nil || !r.At.Equal(want) {
			t.Fatalf("booking %d once keys are at rest: %v %v, want %v", i, r.At, err, want)
		}
	}
	if s.Len() != 1 || s.Reclaimed() != 4 {
		t.Fatalf("Len %d, reclaimed %d; want 1 and 4", s.Len(), s.Reclaimed())
	}
}
