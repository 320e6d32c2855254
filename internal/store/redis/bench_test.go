package redis

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/limiter"
)

var benchLimits = []limiter.Limit{
	{Algorithm: limiter.Anvil, N: limiter.Unlimited, Period: time.Minute},
	{Algorithm: limiter.Exact, N: 100, Period: time.Minute},
	{Algorithm: limiter.Smooth, N: 100, Period: time.Minute},
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("smtp:10.0.%d.%d", i>>8&255, i&255)
	}
	return keys
}

// BenchmarkHit is the cost of one decision, one call at a time (a round
// trip to the test's redis-server on loopback), on 10,000 keys, timed by
// Redis TIME as in production.
func BenchmarkHit(b *testing.B) {
	srv := needServer(b)
	keys := benchKeys(10000)
	for _, lim := range benchLimits {
		b.Run(lim.Algorithm.String(), func(b *testing.B) {
			s := newTestStore(b, srv, Options{Deadline: time.Second})
			out := make([]limiter.Decision, 1)
			checks := make([]limiter.Check, 1)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				checks[0] = limiter.Check{Key: keys[i%len(keys)], Limit: lim}
				if err := s.Hit(b.Context(), time.Now(), 1, limiter.Leaky, checks, out); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkHitParallel is the throughput of concurrent decisions
// (8 x GOMAXPROCS goroutines), which the client pipelines together.
func BenchmarkHitParallel(b *testing.B) {
	srv := needServer(b)
	keys := benchKeys(10000)
	for _, lim := range benchLimits {
		b.Run(lim.Algorithm.String(), func(b *testing.B) {
			s := newTestStore(b, srv, Options{Deadline: time.Second})
			var seq atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				out := make([]limiter.Decision, 1)
				checks := make([]limiter.Check, 1)
				i := int(seq.Add(1)) * 7919
				for pb.Next() {
					checks[0] = limiter.Check{Key: keys[i%len(keys)], Limit: lim}
					if err := s.Hit(b.Context(), time.Now(), 1, limiter.Leaky, checks, out); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
		})
	}
}
