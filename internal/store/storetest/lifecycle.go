package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"sluice/internal/limiter"
)

// sweep lets idle state expire up to now (see Sweeper).
func sweep(t *testing.T, s limiter.Store, now time.Time) {
	t.Helper()
	sw, ok := s.(Sweeper)
	if !ok {
		t.Fatalf("%T does not implement storetest.Sweeper: the suite cannot check expiry", s)
	}
	sw.Sweep(now)
}

// testExpiry: idle state goes away by itself, each kind when its contract
// says, and a key holding leases stays. Periods are short so that a store
// expiring on a real clock (Redis) can be checked by waiting.
func testExpiry(t *testing.T, s limiter.Store) {
	hit(t, s, at(0), 1, limiter.Leaky, anvil("ea", 5, 2*time.Second, 0))
	hit(t, s, at(0), 1, limiter.Leaky, exact("ee", 5, 2*time.Second))
	hit(t, s, at(0), 1, limiter.Leaky, limiter.Check{Key: "es", Limit: limiter.Limit{Algorithm: limiter.Smooth, N: 5, Period: time.Second}})
	l, _, _ := acquire(t, s, at(0), "el", 0, 0)
	acquire(t, s, at(0), "elt", 0, 500*time.Millisecond)
	kept, _, _ := acquire(t, s, at(0), "elh", 0, 0)
	if s.Len() != 6 {
		t.Fatalf("Len %d, want 6", s.Len())
	}
	// A released lease key goes at once.
	if held := release(t, s, at(0), l); held != 0 {
		t.Fatalf("held %d after release", held)
	}
	if s.Len() != 5 {
		t.Fatalf("after release Len %d, want 5", s.Len())
	}
	// At 600 ms: the smooth key is gone (one event at 5 per s drains in
	// 200 ms), and so is the key whose only lease had a 500 ms TTL; the
	// windows and the held lease are alive.
	sweep(t, s, at(600*time.Millisecond))
	if s.Len() != 3 {
		t.Fatalf("after 600ms Len %d, want 3 (ea, ee, elh)", s.Len())
	}
	pk := make([]limiter.Decision, 1)
	if err := s.Peek(ctx, at(600*time.Millisecond), 0, []limiter.Check{exact("ee", 5, 2*time.Second)}, pk); err != nil || pk[0].Count != 1 {
		t.Fatalf("exact window at 600ms: %+v %v, want count 1", pk[0], err)
	}
	if held := heldOn(t, s, at(600*time.Millisecond), "elt"); held != 0 {
		t.Fatalf("lease past its TTL still held: %d", held)
	}
	// At 3 s both windows are over (anvil: started at 0, stale from 3 s;
	// exact: newest event + 2 s); only the held lease is left.
	sweep(t, s, at(3*time.Second))
	if s.Len() != 1 {
		t.Fatalf("after 3s Len %d, want 1 (elh)", s.Len())
	}
	if held := heldOn(t, s, at(3*time.Second), "elh"); held != 1 {
		t.Fatalf("a key holding a lease expired: held %d", held)
	}
	release(t, s, at(3*time.Second), kept)
	if s.Len() != 0 {
		t.Fatalf("after the last release Len %d, want 0", s.Len())
	}
}

// capCheck is an exact limit of one event on the i-th key of about
// CapKeyLen bytes.
func capCheck(i int, period time.Duration) limiter.Check {
	k := fmt.Sprintf("cap-%07d-", i)
	return exact(k+strings.Repeat("k", CapKeyLen-len(k)), 1, period)
}

// testCapRefuses: at the cap new keys get ErrFull, reads still work, and
// keys that expire make room again.
func testCapRefuses(t *testing.T, s limiter.Store, maxKeys int) {
	out := make([]limiter.Decision, 1)
	n := 0
	var err error
	for ; n <= maxKeys; n++ {
		if err = s.Hit(ctx, at(0), 1, limiter.Leaky, []limiter.Check{capCheck(n, time.Second)}, out); err != nil {
			break
		}
		if !out[0].Allowed {
			t.Fatalf("key %d: first event refused: %+v", n, out[0])
		}
	}
	if !errors.Is(err, limiter.ErrFull) {
		t.Fatalf("after %d new keys (cap %d): %v, want ErrFull", n, maxKeys, err)
	}
	if n == 0 || s.Len() > maxKeys {
		t.Fatalf("full after %d keys, Len %d, cap %d", n, s.Len(), maxKeys)
	}
	t.Logf("full after %d keys", n)
	if err := s.Hit(ctx, at(0), 1, limiter.Leaky, []limiter.Check{capCheck(n+1, time.Second)}, out); !errors.Is(err, limiter.ErrFull) {
		t.Fatalf("another new key at the cap: %v, want ErrFull", err)
	}
	if err := s.Peek(ctx, at(0), 1, []limiter.Check{capCheck(n+1, time.Second)}, out); err != nil || !out[0].Allowed {
		t.Fatalf("peek of a new key at the cap: %+v %v", out[0], err)
	}
	if err := s.Peek(ctx, at(0), 1, []limiter.Check{capCheck(0, time.Second)}, out); err != nil || out[0].Allowed || out[0].Count != 1 {
		t.Fatalf("a key held at the cap lost its event: %+v %v", out[0], err)
	}
	// Every window ends at 1 s: then the keys are gone and new ones fit.
	sweep(t, s, at(time.Second))
	if s.Len() != 0 {
		t.Fatalf("Len %d after every key expired", s.Len())
	}
	if err := s.Hit(ctx, at(time.Second), 1, limiter.Leaky, []limiter.Check{capCheck(n+1, time.Second)}, out); err != nil || !out[0].Allowed {
		t.Fatalf("new key once the old ones expired: %+v %v", out[0], err)
	}
}

// testCapEvicts: with eviction, new keys are always accepted, the store
// stays within its cap, and the key written last keeps its state.
func testCapEvicts(t *testing.T, s limiter.Store, maxKeys int) {
	out := make([]limiter.Decision, 1)
	total := 3 * maxKeys
	// Each key is written a microsecond after the one before, so the
	// oldest idle key is also the one that expires soonest.
	now := at(0)
	for i := range total {
		now = at(time.Duration(i) * time.Microsecond)
		if err := s.Hit(ctx, now, 1, limiter.Leaky, []limiter.Check{capCheck(i, time.Hour)}, out); err != nil {
			t.Fatalf("new key %d of %d (cap %d): %v; the store should evict", i, total, maxKeys, err)
		}
		if !out[0].Allowed {
			t.Fatalf("key %d: first event refused: %+v", i, out[0])
		}
	}
	sweep(t, s, now) // nothing has expired; a store counting afresh counts now
	if s.Len() > maxKeys || s.Len() == 0 {
		t.Fatalf("Len %d after %d keys, cap %d", s.Len(), total, maxKeys)
	}
	if err := s.Peek(ctx, now, 1, []limiter.Check{capCheck(total-1, time.Hour)}, out); err != nil || out[0].Allowed || out[0].Count != 1 {
		t.Fatalf("the newest key lost its event: %+v %v", out[0], err)
	}
}

// testCapKeepsLive: a store that drops only keys at rest (see
// Backend.KeepsLiveKeys). A key at its limit is refused; a flood of five
// times the cap in new keys gets ErrFull once the store is full of keys
// still counting, and the first key is still refused after it; keys at
// rest make room again.
func testCapKeepsLive(t *testing.T, s limiter.Store, maxKeys int) {
	out := make([]limiter.Decision, 1)
	first := exact("first-sender", 10, time.Hour)
	for i := range 10 {
		if err := s.Hit(ctx, at(time.Duration(i)*time.Millisecond), 1, limiter.Leaky, []limiter.Check{first}, out); err != nil || !out[0].Allowed {
			t.Fatalf("event %d of 10: %+v %v", i+1, out[0], err)
		}
	}
	now := at(time.Second)
	if err := s.Hit(ctx, now, 1, limiter.Leaky, []limiter.Check{first}, out); err != nil || out[0].Allowed {
		t.Fatalf("11th event within the hour: %+v %v, want refused", out[0], err)
	}
	admitted, full := 0, 0
	for i := range 5 * maxKeys {
		err := s.Hit(ctx, now, 1, limiter.Leaky, []limiter.Check{capCheck(i, time.Hour)}, out)
		switch {
		case errors.Is(err, limiter.ErrFull):
			full++
		case err != nil:
			t.Fatalf("new key %d: %v", i, err)
		default:
			admitted++
		}
	}
	if full == 0 || admitted >= maxKeys || s.Len() > maxKeys {
		t.Fatalf("%d new keys admitted, %d refused as full, Len %d, cap %d", admitted, full, s.Len(), maxKeys)
	}
	if err := s.Hit(ctx, now.Add(time.Second), 1, limiter.Leaky, []limiter.Check{first}, out); err != nil || out[0].Allowed || out[0].Count != 10 {
		t.Fatalf("after %d new keys the first key: %+v %v, want refused at 10", 5*maxKeys, out[0], err)
	}
	// An hour after the flood every key is at rest: new keys fit again.
	later := now.Add(time.Hour + time.Second)
	for i := range maxKeys {
		if err := s.Hit(ctx, later, 1, limiter.Leaky, []limiter.Check{capCheck(5*maxKeys+i, time.Hour)}, out); err != nil || !out[0].Allowed {
			t.Fatalf("new key %d once the others are at rest: %+v %v", i, out[0], err)
		}
	}
}
