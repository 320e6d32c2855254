package memory

import (
	"fmt"
	"path/filepath"
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

// BenchmarkHit is the cost of one decision per algorithm, on 10,000 keys,
// with the clock moving 1 ms per hit.
func BenchmarkHit(b *testing.B) {
	keys := benchKeys(10000)
	for _, lim := range benchLimits {
		b.Run(lim.Algorithm.String(), func(b *testing.B) {
			s := New(Options{})
			defer s.Close()
			out := make([]limiter.Decision, 1)
			checks := make([]limiter.Check, 1)
			now := t0
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				checks[0] = limiter.Check{Key: keys[i%len(keys)], Limit: lim}
				now = now.Add(time.Millisecond)
				if err := s.Hit(b.Context(), now, 1, limiter.Leaky, checks, out); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkHitParallel measures contention on the store: every goroutine
// decides with a clock of its own (no shared counter between them), on
// its own stream through 10,000 keys ("spread": the shards' locks) or on
// one key ("hot": one shard's lock and one entry).
func BenchmarkHitParallel(b *testing.B) {
	keys := benchKeys(10000)
	for _, lim := range benchLimits {
		for _, spread := range []bool{true, false} {
			name := lim.Algorithm.String() + "/hot"
			if spread {
				name = lim.Algorithm.String() + "/spread"
			}
			b.Run(name, func(b *testing.B) {
				s := New(Options{})
				defer s.Close()
				var worker atomic.Int64 // read once per goroutine
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					out := make([]limiter.Decision, 1)
					checks := []limiter.Check{{Key: keys[0], Limit: lim}}
					w := int(worker.Add(1))
					i := w * 7919
					now := t0
					for pb.Next() {
						if spread {
							checks[0].Key = keys[i%len(keys)]
						}
						now = now.Add(time.Microsecond)
						if err := s.Hit(b.Context(), now, 1, limiter.Leaky, checks, out); err != nil {
							b.Fatal(err)
						}
						i++
					}
				})
			})
		}
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	keys := benchKeys(1000)
	s := New(Options{})
	defer s.Close()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		l, _, _, err := s.Acquire(b.Context(), t0, keys[i%len(keys)], 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Release(b.Context(), t0, l); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkReserve(b *testing.B) {
	for _, journal := range []bool{false, true} {
		b.Run(fmt.Sprintf("journal=%v", journal), func(b *testing.B) { benchReserve(b, journal) })
	}
}

func benchReserve(b *testing.B, journal bool) {
	s := New(Options{})
	defer s.Close()
	if journal { // from the first write on, bookings are appended to the file
		if _, err := s.WriteSnapshot(filepath.Join(b.TempDir(), "s"), t0, false); err != nil {
			b.Fatal(err)
		}
	}
	lim := limiter.Limit{Algorithm: limiter.Exact, N: 1000, Period: time.Second}
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		if _, err := s.Reserve(b.Context(), now, "relay", lim, 1, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteSnapshot is the periodic write of a store holding 30,000
// keys: "changes" with 1,000 of them changed since the write before
// (appended after the base), "idle" with none, "base" the whole store
// written anew (a new file each time).
func BenchmarkWriteSnapshot(b *testing.B) {
	for _, mode := range []string{"changes", "idle", "base"} {
		b.Run(mode, func(b *testing.B) {
			s := New(Options{})
			defer s.Close()
			keys := benchKeys(30000)
			out := make([]limiter.Decision, 1)
			hit := func(now time.Time, k string) {
				c := []limiter.Check{{Key: k, Limit: benchLimits[2]}}
				if err := s.Hit(b.Context(), now, 1, limiter.Leaky, c, out); err != nil {
					b.Fatal(err)
				}
			}
			for _, k := range keys {
				hit(t0, k)
			}
			dir := b.TempDir()
			path := filepath.Join(dir, "s")
			if _, err := s.WriteSnapshot(path, t0, false); err != nil {
				b.Fatal(err)
			}
			now := t0
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Millisecond)
				if mode == "changes" {
					b.StopTimer()
					for j := range 1000 {
						hit(now, keys[(i*1000+j)%len(keys)])
					}
					b.StartTimer()
				}
				p := path
				if mode == "base" {
					p = filepath.Join(dir, fmt.Sprint("s", i%2))
				}
				if _, err := s.WriteSnapshot(p, now, false); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkSessionOnClass is one session's count on a class's lease key
// that holds held sessions already (a busy MX's class): the session's
// Acquire, then the Release of the oldest session, as sessions end in
// about the order they began. Its cost against held is the curve.
func BenchmarkSessionOnClass(b *testing.B) {
	for _, held := range []int{10, 1000, 100000} {
		b.Run(fmt.Sprintf("held=%d", held), func(b *testing.B) {
			s := New(Options{})
			defer s.Close()
			ctx := b.Context()
			ring := make([]limiter.Lease, held)
			for i := range ring {
				l, _, ok, err := s.Acquire(ctx, t0, "class", 0, 0)
				if err != nil || !ok {
					b.Fatal(ok, err)
				}
				ring[i] = l
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				l, _, ok, err := s.Acquire(ctx, t0, "class", 0, 0)
				if err != nil || !ok {
					b.Fatal(ok, err)
				}
				if n, err := s.Release(ctx, t0, ring[i]); err != nil || n != int64(held) {
					b.Fatalf("release: %d held, %v; want %d", n, err, held)
				}
				ring[i] = l
				i = (i + 1) % held
			}
		})
	}
}
