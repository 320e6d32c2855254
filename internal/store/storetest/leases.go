package storetest

import (
	"sync"
	"testing"
	"time"

	"sluice/internal/limiter"
)

// acquire calls Acquire and fails the test on an error, so that a store
// that errs can never pass for one that refuses.
func acquire(t *testing.T, s limiter.Store, now time.Time, key string, capacity int64, ttl time.Duration) (limiter.Lease, int64, bool) {
	t.Helper()
	l, held, ok, err := s.Acquire(ctx, now, key, capacity, ttl)
	if err != nil {
		t.Fatalf("Acquire(%s, cap %d, ttl %s): %v", key, capacity, ttl, err)
	}
	return l, held, ok
}

// release calls Release and fails the test on an error.
func release(t *testing.T, s limiter.Store, now time.Time, l limiter.Lease) int64 {
	t.Helper()
	held, err := s.Release(ctx, now, l)
	if err != nil {
		t.Fatalf("Release(%+v): %v", l, err)
	}
	return held
}

// heldOn calls Held and fails the test on an error.
func heldOn(t *testing.T, s limiter.Store, now time.Time, key string) int64 {
	t.Helper()
	held, err := s.Held(ctx, now, key)
	if err != nil {
		t.Fatalf("Held(%s): %v", key, err)
	}
	return held
}

func testLeases(t *testing.T, s limiter.Store) {
	var ls []limiter.Lease
	for i := int64(1); i <= 3; i++ {
		l, held, ok := acquire(t, s, at(0), "c", 3, 0)
		if !ok || held != i {
			t.Fatalf("acquire %d: held %d ok %v", i, held, ok)
		}
		ls = append(ls, l)
	}
	if _, held, ok := acquire(t, s, at(0), "c", 3, 0); ok || held != 3 {
		t.Fatalf("acquire over capacity: ok %v held %d", ok, held)
	}
	if held := release(t, s, at(0), ls[1]); held != 2 {
		t.Fatalf("after release: %d", held)
	}
	if held := release(t, s, at(0), ls[1]); held != 2 {
		t.Fatalf("double release changed the count: %d", held)
	}
	if _, _, ok := acquire(t, s, at(0), "c", 3, 0); !ok {
		t.Fatal("slot not reusable after release")
	}
	if held := heldOn(t, s, at(0), "c"); held != 3 {
		t.Fatalf("held %d, want 3", held)
	}
	// Capacity 0 counts without a cap.
	for range 5 {
		if _, _, ok := acquire(t, s, at(0), "uncapped", 0, 0); !ok {
			t.Fatal("uncapped acquire refused")
		}
	}
	if held := heldOn(t, s, at(0), "uncapped"); held != 5 {
		t.Fatalf("held %d", held)
	}
}

func testLeasesConcurrent(t *testing.T, s limiter.Store) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var got []limiter.Lease
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, _, ok, err := s.Acquire(ctx, at(0), "cc", 10, 0)
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				got = append(got, l)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(got) != 10 {
		t.Fatalf("granted %d leases, want 10", len(got))
	}
	for _, l := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Release(ctx, at(0), l); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if held := heldOn(t, s, at(0), "cc"); held != 0 {
		t.Fatalf("held %d after releasing all", held)
	}
}

func testLeaseTTL(t *testing.T, s limiter.Store) {
	if _, _, ok := acquire(t, s, at(0), "ttl", 1, 30*time.Second); !ok {
		t.Fatal("first acquire refused")
	}
	if _, held, ok := acquire(t, s, at(29*time.Second), "ttl", 1, 30*time.Second); ok || held != 1 {
		t.Fatalf("lease ended before its TTL: ok %v held %d", ok, held)
	}
	if _, held, ok := acquire(t, s, at(31*time.Second), "ttl", 1, 30*time.Second); !ok || held != 1 {
		t.Fatalf("expired lease still held: ok %v held %d", ok, held)
	}
	// The expired lease no longer counts: the new one is the only one.
	if held := heldOn(t, s, at(31*time.Second), "ttl"); held != 1 {
		t.Fatalf("held %d, want 1", held)
	}
}
