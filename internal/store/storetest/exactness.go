package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/limiter"
)

// exactnessKinds are the limit kinds checked under concurrency: each
// admits exactly N when every hit falls at one instant.
var exactnessKinds = []struct {
	name  string
	check func(key string) []limiter.Check
	want  int
}{
	{"anvil", func(k string) []limiter.Check {
		return []limiter.Check{{Key: k, Limit: limiter.Limit{Algorithm: limiter.Anvil, N: 10, Period: time.Minute}}}
	}, 10},
	{"exact", func(k string) []limiter.Check {
		return []limiter.Check{{Key: k, Limit: limiter.Limit{Algorithm: limiter.Exact, N: 10, Period: time.Minute}}}
	}, 10},
	{"smooth", func(k string) []limiter.Check {
		return []limiter.Check{{Key: k, Limit: limiter.Limit{Algorithm: limiter.Smooth, N: 100, Period: time.Minute, Burst: 10}}}
	}, 10},
	// Three limits in one decision: all must allow, all or nothing.
	{"anvil+exact+smooth", func(k string) []limiter.Check {
		return []limiter.Check{
			{Key: k + "a", Limit: limiter.Limit{Algorithm: limiter.Anvil, N: 15, Period: time.Minute}},
			{Key: k + "e", Limit: limiter.Limit{Algorithm: limiter.Exact, N: 10, Period: time.Minute}},
			{Key: k + "s", Limit: limiter.Limit{Algorithm: limiter.Smooth, N: 100, Period: time.Minute, Burst: 12}},
		}
	}, 10},
}

// checkExactness sends 200 hits for one key from `workers` goroutines
// spread over stores (several stores share one backend) and returns how
// many were admitted.
func checkExactness(t *testing.T, stores []limiter.Store, now time.Time, checks []limiter.Check, mode limiter.Mode, workers int) int {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[w%len(stores)]
			out := make([]limiter.Decision, len(checks))
			for range 200 / workers {
				if err := s.Hit(context.Background(), now, 1, mode, checks, out); err != nil {
					t.Error(err)
					return
				}
				all := true
				for _, d := range out {
					all = all && d.Allowed
				}
				if all {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return int(admitted.Load())
}

// Exactness checks that every limit kind (anvil, exact, smooth, and the
// three in one decision), leaky and strict, admits exactly its limit
// when 1, 8 or 64 goroutines hit one key at once through stores, which
// share one backend; backend names it in messages.
func Exactness(t *testing.T, backend string, stores []limiter.Store, now time.Time) {
	t.Helper()
	var lines []string
	for _, k := range exactnessKinds {
		for _, mode := range []limiter.Mode{limiter.Leaky, limiter.Strict} {
			for _, workers := range []int{1, 8, 64} {
				mname := map[limiter.Mode]string{limiter.Leaky: "leaky", limiter.Strict: "strict"}[mode]
				key := fmt.Sprintf("%s-%s-%d", k.name, mname, workers)
				got := checkExactness(t, stores, now, k.check(key), mode, workers)
				if got != k.want {
					t.Errorf("%s %s %s c=%d: admitted %d of 200, want exactly %d", backend, k.name, mname, workers, got, k.want)
				}
				lines = append(lines, fmt.Sprintf("%s/%s/c=%d:%d", k.name, mname, workers, got))
			}
		}
	}
	t.Logf("%s, %d store(s), 200 hits per case at one instant, admitted (want 10 each): %s", backend, len(stores), strings.Join(lines, " "))
}
