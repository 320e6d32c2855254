package redis

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/limiter"
	"sluice/internal/testutil/redistest"
)

// replicatedServer starts a master and one replica of it (loopback), and
// waits until the replica is in sync.
func replicatedServer(b *testing.B) *redistest.Server {
	b.Helper()
	needServer(b)
	master, err := redistest.Start(b.TempDir(), 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(master.Kill)
	host, port, _ := splitHostPort(master.Addr())
	replica, err := redistest.Start(b.TempDir(), 0, "--replicaof", host, port)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(replica.Kill)
	if err := redistest.WaitFor(30*time.Second, func() error {
		off, err := replOffset(replica.Addr())
		if err == nil && off <= 0 {
			err = fmt.Errorf("replica not in sync (offset %d)", off)
		}
		return err
	}); err != nil {
		b.Fatal(err)
	}
	return master
}

func splitHostPort(addr string) (string, string, error) {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[:i], addr[i+1:], nil
		}
	}
	return "", "", fmt.Errorf("%q has no port", addr)
}

// BenchmarkHitWaitReplicas is the cost of wait_replicas: exact decisions
// at c=8 on a master with one replica (loopback), answered at once
// (wait=0) or once the replica holds each (wait=1, Redis WAIT); it
// reports decisions/s and the p50 and p99 latency of one decision.
func BenchmarkHitWaitReplicas(b *testing.B) {
	srv := replicatedServer(b)
	keys := benchKeys(10000)
	lim := limiter.Limit{Algorithm: limiter.Exact, N: 1_000_000, Period: time.Minute}
	for _, wait := range []int{0, 1} {
		b.Run(fmt.Sprintf("wait=%d", wait), func(b *testing.B) {
			s := newTestStore(b, srv, Options{Deadline: time.Second, WaitReplicas: wait, WaitTimeout: 500 * time.Millisecond})
			var seq atomic.Int64
			var mu sync.Mutex
			var lat []time.Duration
			b.SetParallelism(8)
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				out := make([]limiter.Decision, 1)
				checks := make([]limiter.Check, 1)
				i := int(seq.Add(1)) * 7919
				var mine []time.Duration
				for pb.Next() {
					checks[0] = limiter.Check{Key: keys[i%len(keys)], Limit: lim}
					t0 := time.Now()
					if err := s.Hit(b.Context(), time.Now(), 1, limiter.Leaky, checks, out); err != nil {
						b.Error(err)
						return
					}
					mine = append(mine, time.Since(t0))
					i++
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			})
			elapsed := time.Since(start)
			if len(lat) == 0 {
				return
			}
			slices.Sort(lat)
			b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "decisions/s")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}
