package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"sluice/internal/limiter"
)

// TestLeasesAgainstModel drives Acquire, Release and Held on a few keys
// with a mix of leases with and without a TTL, in a seeded random order
// over moving time, and checks every count against a plain model: the
// place each lease keeps (leaseAt, moved by every release and every
// expiry) finds the right lease, and expiry looks at a key only when a
// TTL may have passed.
func TestLeasesAgainstModel(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			s := New(Options{})
			defer s.Close()
			ctx := t.Context()
			keys := []string{"a", "b", "c"}
			model := map[string]map[uint64]time.Time{} // key -> lease -> expiry (zero: none)
			var held []limiter.Lease
			now := t0
			live := func(key string) int64 {
				n := int64(0)
				for _, exp := range model[key] {
					if exp.IsZero() || exp.After(now) {
						n++
					}
				}
				return n
			}
			for step := range 3000 {
				key := keys[rng.IntN(len(keys))]
				switch op := rng.IntN(10); {
				case op < 5:
					var ttl time.Duration
					if rng.IntN(3) == 0 {
						ttl = time.Duration(1+rng.IntN(20)) * time.Second
					}
					l, n, ok, err := s.Acquire(ctx, now, key, 0, ttl)
					if err != nil || !ok {
						t.Fatalf("step %d: acquire %s: %v %v", step, key, ok, err)
					}
					if model[key] == nil {
						model[key] = map[uint64]time.Time{}
					}
					for id, exp := range model[key] {
						if !exp.IsZero() && !exp.After(now) {
							delete(model[key], id)
						}
					}
					var exp time.Time
					if ttl > 0 {
						exp = now.Add(ttl)
					}
					model[key][l.ID] = exp
					if want := int64(len(model[key])); n != want {
						t.Fatalf("step %d: acquire %s holds %d, want %d", step, key, n, want)
					}
					held = append(held, l)
				case op < 8 && len(held) > 0:
					i := rng.IntN(len(held))
					l := held[i]
					held[i] = held[len(held)-1]
					held = held[:len(held)-1]
					n, err := s.Release(ctx, now, l)
					if err != nil {
						t.Fatalf("step %d: release: %v", step, err)
					}
					delete(model[l.Key], l.ID)
					if want := live(l.Key); n != want {
						t.Fatalf("step %d: release on %s holds %d, want %d", step, l.Key, n, want)
					}
				case op == 8:
					now = now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
				default:
					n, err := s.Held(ctx, now, key)
					if err != nil {
						t.Fatal(err)
					}
					if want := live(key); n != want {
						t.Fatalf("step %d: %s holds %d, want %d", step, key, n, want)
					}
				}
			}
		})
	}
}

// A key whose one lease is taken and given back, as a class's slot is at
// one session at a time, allocates nothing once warm: the freed lease
// set's array serves the next (keptLeaseCap, keptLeaseSets).
func TestLeaseCycleAllocatesNothing(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	ctx := context.Background()
	cycle := func() {
		l, _, ok, err := s.Acquire(ctx, t0, "class:loopback", 10, 0)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		if held, err := s.Release(ctx, t0, l); err != nil || held != 0 {
			t.Fatal(held, err)
		}
	}
	cycle()
	if n := testing.AllocsPerRun(100, cycle); n != 0 {
		t.Fatalf("%v allocations a lease taken and given back", n)
	}
}
