package redis

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/limiter"
	"sluice/internal/testutil/redistest"
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

// BenchmarkHitParallelCluster is BenchmarkHitParallel's exact decisions on
// a Redis Cluster of one master and of three (no replicas), in Cluster
// mode: what spreading the keys over more masters buys (on one machine
// they share its cores).
func BenchmarkHitParallelCluster(b *testing.B) {
	needServer(b)
	keys := benchKeys(10000)
	lim := benchLimits[1]
	for _, masters := range []int{1, 3} {
		c, err := redistest.StartCluster(b.TempDir(), masters, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Kill)
		b.Run(fmt.Sprintf("masters=%d", masters), func(b *testing.B) {
			s, err := New(b.Context(), Options{Addrs: c.Addrs(), Cluster: true, Deadline: time.Second,
				KeyPrefix: fmt.Sprintf("b%d:", prefixSeq.Add(1))})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
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
