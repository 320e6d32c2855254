package redis

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"sluice/internal/limiter"
	"sluice/internal/store/memory"
	"sluice/internal/store/storetest"
)

// TestSameAsMemory drives the Redis store and store/memory (the reference)
// with the same random operations, at times with odd nanoseconds (the
// reservation bit), and requires the same answers throughout.
func TestSameAsMemory(t *testing.T) {
	srv := needServer(t)
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := newTestStore(t, srv, Options{UseCallerTime: true, LeaseTTL: 1000 * time.Hour})
			m := memory.New(memory.Options{})
			defer m.Close()
			compareStores(t, rand.New(rand.NewPCG(seed, 99)), m, r, 1500)
		})
	}
}

type keyLimits struct {
	key  string
	lims []limiter.Limit // one is picked per call: limits change with the config
}

var modelKeys = []keyLimits{
	{"a0", []limiter.Limit{{Algorithm: limiter.Anvil, N: 3, Period: 2 * time.Second}}},
	{"a1", []limiter.Limit{{Algorithm: limiter.Anvil, N: 5, Period: 5 * time.Second}, {Algorithm: limiter.Anvil, N: 2, Period: 5 * time.Second}}},
	{"e0", []limiter.Limit{{Algorithm: limiter.Exact, N: 3, Period: 1500 * time.Millisecond}}},
	{"e1", []limiter.Limit{{Algorithm: limiter.Exact, N: 5, Period: 3 * time.Second}, {Algorithm: limiter.Exact, N: 2, Period: 3 * time.Second}}},
	{"e2", []limiter.Limit{{Algorithm: limiter.Exact, N: 1, Period: 700 * time.Millisecond}}},
	{"s0", []limiter.Limit{{Algorithm: limiter.Smooth, N: 3, Period: time.Second, Burst: 2}}},
	{"s1", []limiter.Limit{{Algorithm: limiter.Smooth, N: 7, Period: 10 * time.Second}}},
}

type leasePair struct {
	m, r limiter.Lease
}

type resvPair struct {
	m, r limiter.Reservation
}

func compareStores(t *testing.T, rng *rand.Rand, m, r limiter.Store, steps int) {
	t.Helper()
	now := storetest.T0.Add(time.Duration(rng.IntN(1e9)))
	var hits []time.Time
	var leases []leasePair
	var resv []resvPair
	pick := func() (keyLimits, limiter.Limit) {
		k := modelKeys[rng.IntN(len(modelKeys))]
		return k, k.lims[rng.IntN(len(k.lims))]
	}
	mkChecks := func() []limiter.Check {
		cs := make([]limiter.Check, 1+rng.IntN(3))
		for i := range cs {
			k, lim := pick()
			cs[i] = limiter.Check{Key: k.key, Limit: lim}
			if lim.Algorithm == limiter.Anvil {
				cs[i].Counter = uint8(rng.IntN(3))
			}
		}
		return cs
	}
	for step := range steps {
		now = now.Add(time.Duration(rng.IntN(400))*time.Millisecond + time.Duration(rng.IntN(1000)))
		where := func() string { return fmt.Sprintf("step %d at %s", step, now.Sub(storetest.T0)) }
		switch op := rng.IntN(100); {
		case op < 45: // Hit
			cs := mkChecks()
			n := int64(1 + rng.IntN(3))
			mode := limiter.Leaky
			if rng.IntN(4) == 0 {
				mode = limiter.Strict
			}
			om, or := make([]limiter.Decision, len(cs)), make([]limiter.Decision, len(cs))
			em := m.Hit(ctx, now, n, mode, cs, om)
			er := r.Hit(ctx, now, n, mode, cs, or)
			if em != nil || er != nil {
				t.Fatalf("%s: Hit errors: memory %v, redis %v", where(), em, er)
			}
			if fmt.Sprint(om) != fmt.Sprint(or) {
				t.Fatalf("%s: Hit(n=%d, %v, %+v):\nmemory %+v\nredis  %+v", where(), n, mode, cs, om, or)
			}
			hits = append(hits, now)
		case op < 55: // Peek
			cs := mkChecks()
			n := int64(rng.IntN(3))
			om, or := make([]limiter.Decision, len(cs)), make([]limiter.Decision, len(cs))
			if err := m.Peek(ctx, now, n, cs, om); err != nil {
				t.Fatal(err)
			}
			if err := r.Peek(ctx, now, n, cs, or); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(om) != fmt.Sprint(or) {
				t.Fatalf("%s: Peek(n=%d, %+v):\nmemory %+v\nredis  %+v", where(), n, cs, om, or)
			}
		case op < 62: // Undo a recent hit
			if len(hits) == 0 {
				continue
			}
			at := hits[len(hits)-1-rng.IntN(min(len(hits), 3))]
			if now.Sub(at) > 500*time.Millisecond {
				continue // the store contract leaves events outside their window alone; memory's log may differ there
			}
			cs := mkChecks()
			n := int64(1 + rng.IntN(2))
			if err := m.Undo(ctx, now, at, n, cs); err != nil {
				t.Fatal(err)
			}
			if err := r.Undo(ctx, now, at, n, cs); err != nil {
				t.Fatal(err)
			}
		case op < 72: // Reserve
			k, lim := pick()
			if lim.Algorithm != limiter.Exact {
				continue
			}
			n := int64(1 + rng.IntN(int(lim.N)))
			wait := time.Duration(rng.IntN(6000)) * time.Millisecond
			rm, em := m.Reserve(ctx, now, k.key, lim, n, wait)
			rr, er := r.Reserve(ctx, now, k.key, lim, n, wait)
			if !errors.Is(er, em) || !rm.At.Equal(rr.At) {
				t.Fatalf("%s: Reserve(%s, %s, n=%d, wait %s): memory %v %v, redis %v %v", where(), k.key, lim, n, wait, rm.At.Sub(storetest.T0), em, rr.At.Sub(storetest.T0), er)
			}
			if em == nil {
				resv = append(resv, resvPair{rm, rr})
			}
		case op < 77: // Cancel
			if len(resv) == 0 {
				continue
			}
			i := rng.IntN(len(resv))
			p := resv[i]
			resv = append(resv[:i], resv[i+1:]...)
			if err := m.Cancel(ctx, now, p.m); err != nil {
				t.Fatal(err)
			}
			if err := r.Cancel(ctx, now, p.r); err != nil {
				t.Fatal(err)
			}
		case op < 87: // Acquire
			key := fmt.Sprintf("l%d", rng.IntN(3))
			capacity := int64(rng.IntN(4))
			ttl := time.Duration(rng.IntN(3)) * time.Duration(1+rng.IntN(3000)) * time.Millisecond
			lm, hm, okm, em := m.Acquire(ctx, now, key, capacity, ttl)
			lr, hr, okr, er := r.Acquire(ctx, now, key, capacity, ttl)
			if em != nil || er != nil || hm != hr || okm != okr {
				t.Fatalf("%s: Acquire(%s, %d, %s): memory %d %v %v, redis %d %v %v", where(), key, capacity, ttl, hm, okm, em, hr, okr, er)
			}
			if okm {
				leases = append(leases, leasePair{lm, lr})
			}
		case op < 95: // Release
			if len(leases) == 0 {
				continue
			}
			i := rng.IntN(len(leases))
			p := leases[i]
			if rng.IntN(4) != 0 { // sometimes release twice
				leases = append(leases[:i], leases[i+1:]...)
			}
			hm, em := m.Release(ctx, now, p.m)
			hr, er := r.Release(ctx, now, p.r)
			if em != nil || er != nil || hm != hr {
				t.Fatalf("%s: Release(%s): memory %d %v, redis %d %v", where(), p.m.Key, hm, em, hr, er)
			}
		default: // Held
			key := fmt.Sprintf("l%d", rng.IntN(3))
			hm, em := m.Held(ctx, now, key)
			hr, er := r.Held(ctx, now, key)
			if em != nil || er != nil || hm != hr {
				t.Fatalf("%s: Held(%s): memory %d %v, redis %d %v", where(), key, hm, em, hr, er)
			}
		}
	}
}
