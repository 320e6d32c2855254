package memory

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"sluice/internal/limiter"
)

var (
	limAnvil  = limiter.Limit{Algorithm: limiter.Anvil, N: 5, Period: time.Minute}
	limExact  = limiter.Limit{Algorithm: limiter.Exact, N: 5, Period: 2 * time.Second}
	limSmooth = limiter.Limit{Algorithm: limiter.Smooth, N: 10, Period: time.Minute, Burst: 3}
)

// fill gives a store keys of every kind: anvil counters, exact logs with
// hits and booked slots, a smooth bucket, and a lease.
func fill(t testing.TB, s *Store, now time.Time) []limiter.Check {
	t.Helper()
	ctx := t.Context()
	checks := []limiter.Check{
		{Key: "anvil\x00a", Limit: limAnvil, Counter: 2},
		{Key: "exact\x00b", Limit: limExact},
		{Key: "smooth\x00c", Limit: limSmooth},
	}
	out := make([]limiter.Decision, 1)
	for i := range 3 {
		for _, c := range checks {
			if err := s.Hit(ctx, now.Add(time.Duration(i)*time.Millisecond), 1, limiter.Strict, []limiter.Check{c}, out); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 7 { // 5 slots now, 2 booked a window later
		if _, err := s.Reserve(ctx, now, "throttle\x00r", limExact, 1, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, ok, err := s.Acquire(ctx, now, "lease\x00x", 3, 0); !ok || err != nil {
		t.Fatal(ok, err)
	}
	return append(checks, limiter.Check{Key: "throttle\x00r", Limit: limExact})
}

func peekAll(t *testing.T, s *Store, now time.Time, checks []limiter.Check) []limiter.Decision {
	t.Helper()
	out := make([]limiter.Decision, len(checks))
	for i, c := range checks {
		if err := s.Peek(t.Context(), now, 1, []limiter.Check{c}, out[i:i+1]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestSnapshotRoundTrip: a store written and restored into a new one
// decides exactly as the original does, at any later time; leases are not
// restored; booked slots are.
func TestSnapshotRoundTrip(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	now := t0
	checks := fill(t, s, now)
	path := filepath.Join(t.TempDir(), "store.snapshot")
	st, err := s.WriteSnapshot(path, now.Add(10*time.Millisecond), true)
	if err != nil {
		t.Fatal(err)
	}
	if st.Keys != 4 || st.Bytes == 0 {
		t.Fatalf("wrote %+v, want 4 rate keys", st)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*tmp*")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	for _, later := range []time.Duration{500 * time.Millisecond, 1999 * time.Millisecond, 2500 * time.Millisecond, 30 * time.Second} {
		s := New(Options{}) // the original, as it was when written
		fill(t, s, now)
		r := New(Options{})
		rst, err := r.Restore(path, SnapshotLimit(testMaxKeys), now.Add(later))
		if err != nil {
			t.Fatal(err)
		}
		if !rst.Clean || !rst.Taken.Equal(now.Add(10*time.Millisecond)) || rst.Cut != 0 {
			t.Fatalf("restored %+v", rst)
		}
		got, want := peekAll(t, r, now.Add(later), checks), peekAll(t, s, now.Add(later), checks)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("after %s: restored store decides\n%+v\nthe original\n%+v", later, got, want)
		}
		if held, _ := r.Held(t.Context(), now.Add(later), "lease\x00x"); held != 0 {
			t.Errorf("a lease was restored")
		}
		// The booked slots are kept: the next booking comes after them.
		res, err := r.Reserve(t.Context(), now.Add(later), "throttle\x00r", limExact, 1, time.Minute)
		want2, err2 := s.Reserve(t.Context(), now.Add(later), "throttle\x00r", limExact, 1, time.Minute)
		if err != nil || err2 != nil || !res.At.Equal(want2.At) {
			t.Errorf("after %s: booked at %v (%v), the original at %v (%v)", later, res.At, err, want2.At, err2)
		}
		r.Close()
		s.Close()
	}
}

// TestSnapshotDropsExpired: keys whose window ended while the daemon was
// down are not restored.
func TestSnapshotDropsExpired(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	fill(t, s, t0)
	data := s.encodeBytes(t, t0, false)
	r := New(Options{})
	defer r.Close()
	// 3 s later the exact keys (2 s window; the last booking at about 2 s)
	// are over; anvil (1 min) and smooth remain.
	st, err := r.restoreBytes(data, t0.Add(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if st.Keys != 2 || st.Dropped != 2 || r.Len() != 2 {
		t.Fatalf("restored %+v, Len %d; want 2 kept, 2 dropped", st, r.Len())
	}
	if _, err := r.Restore("/nonexistent", 1, t0); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("restore into a non-empty store: %v", err)
	}
}

// TestReadSnapshotFiles: a missing file is os.ErrNotExist (a first start),
// anything else unreadable is ErrSnapshot.
func TestReadSnapshotFiles(t *testing.T) {
	dir := t.TempDir()
	r := New(Options{})
	defer r.Close()
	if _, err := r.Restore(filepath.Join(dir, "none"), SnapshotLimit(testMaxKeys), t0); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("SLUICEMS garbage"), 0o600)
	if _, err := r.Restore(bad, SnapshotLimit(testMaxKeys), t0); !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("garbage: %v", err)
	}
	// A write into a directory that does not exist fails cleanly.
	s := New(Options{})
	defer s.Close()
	if _, err := s.WriteSnapshot(filepath.Join(dir, "no", "such"), t0, false); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
}

// TestRestartGuard: after SetRestartGuard(since), exact limits grant
// nothing before since+Period and book no slot before it; anvil and
// smooth limits are not held; after since+Period all is as usual.
func TestRestartGuard(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	ctx := t.Context()
	s.SetRestartGuard(t0)
	out := make([]limiter.Decision, 1)
	ex := limiter.Check{Key: "e", Limit: limExact}
	for _, at := range []time.Duration{0, time.Second, limExact.Period - time.Nanosecond} {
		if err := s.Hit(ctx, t0.Add(at), 1, limiter.Leaky, []limiter.Check{ex}, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Allowed || out[0].RetryAfter != limExact.Period-at {
			t.Fatalf("exact hit %s into the guard: %+v", at, out[0])
		}
		if err := s.Peek(ctx, t0.Add(at), 1, []limiter.Check{ex}, out); err != nil || out[0].Allowed {
			t.Fatalf("peek %s into the guard: %+v %v", at, out[0], err)
		}
	}
	for _, c := range []limiter.Check{{Key: "a", Limit: limAnvil}, {Key: "s", Limit: limSmooth}} {
		if err := s.Hit(ctx, t0, 1, limiter.Leaky, []limiter.Check{c}, out); err != nil || !out[0].Allowed {
			t.Fatalf("%s limit held by the guard: %+v %v", c.Limit.Algorithm, out[0], err)
		}
	}
	// Reservations: the first N go at since+Period, the next after that
	// window; one that cannot wait that long is refused with the time.
	if r, err := s.Reserve(ctx, t0, "r", limExact, 1, time.Second); !errors.Is(err, limiter.ErrTooLong) || !r.At.Equal(t0.Add(limExact.Period)) {
		t.Fatalf("short wait: %+v %v", r, err)
	}
	for i := range limExact.N + 1 {
		r, err := s.Reserve(ctx, t0.Add(time.Second), "r", limExact, 1, time.Minute)
		want := t0.Add(limExact.Period)
		if i == limExact.N {
			want = want.Add(limExact.Period)
		}
		if err != nil || !r.At.Equal(want) {
			t.Fatalf("booking %d: %v %v, want %v", i, r.At, err, want)
		}
	}
	if err := s.Hit(ctx, t0.Add(limExact.Period), 1, limiter.Leaky, []limiter.Check{ex}, out); err != nil || !out[0].Allowed {
		t.Fatalf("exact hit after the guard: %+v %v", out[0], err)
	}
	s.SetRestartGuard(time.Time{})
	if r, err := s.Reserve(ctx, t0, "r2", limExact, 1, 0); err != nil || !r.At.Equal(t0) {
		t.Fatalf("guard off: %+v %v", r, err)
	}
}

// TestSnapshotCost reports what a snapshot of 300,000 keys (100,000 each
// of anvil, exact with 10 events, smooth) costs: the write, the file, the
// longest a shard's lock is held (what a decision can wait), and the
// restore. It asserts only that everything comes back.
func TestSnapshotCost(t *testing.T) {
	if testing.Short() {
		t.Skip("300,000 keys")
	}
	const n = 100_000
	s := New(Options{})
	defer s.Close()
	out := make([]limiter.Decision, 1)
	exact := limiter.Limit{Algorithm: limiter.Exact, N: 100, Period: time.Hour}
	for i := range n {
		for j, c := range []limiter.Check{
			{Key: fmt.Sprintf("anvil:10.%d.%d", i>>8, i&255), Limit: limiter.Limit{Algorithm: limiter.Anvil, N: limiter.Unlimited, Period: time.Hour}},
			{Key: fmt.Sprintf("exact:user%d@example.org", i), Limit: exact},
			{Key: fmt.Sprintf("smooth:10.%d.%d", i>>8, i&255), Limit: limSmooth},
		} {
			reps := 1
			if j == 1 {
				reps = 10
			}
			for k := range reps {
				if err := s.Hit(t.Context(), t0.Add(time.Duration(k)*time.Millisecond), 1, limiter.Leaky, []limiter.Check{c}, out); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	path := filepath.Join(t.TempDir(), "store.snapshot")
	st, err := s.WriteSnapshot(path, t0.Add(time.Second), true)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := New(Options{})
	defer r.Close()
	rst, err := r.Restore(path, SnapshotLimit(testMaxKeys), t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("%d keys: snapshot %d bytes (%.0f per key) written in %v, longest shard lock %v (64 shards); read and restored in %v",
		st.Keys, st.Bytes, float64(st.Bytes)/float64(st.Keys), st.Took.Round(time.Millisecond), st.MaxHold.Round(time.Microsecond), took.Round(time.Millisecond))
	if st.Keys != 3*n || rst.Keys != 3*n || r.Len() != 3*n {
		t.Fatalf("wrote %d, restored %d, holds %d; want %d", st.Keys, rst.Keys, r.Len(), 3*n)
	}
}
