package pool_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/pool"
	"sluice/internal/testutil/cputime"
)

// startBench runs a pool of n fake workers for a benchmark and waits for
// all of them to be idle: at most 30 s, polling every millisecond, and
// failing at once if the pool stops.
func startBench(b *testing.B, n int) *pool.Pool {
	b.Helper()
	cfg := baseConfig()
	cfg.MinWorkers, cfg.MaxWorkers, cfg.MaxRequests = n, n, 1<<30
	cfg.QueueSize = 128
	cfg.SlewTime = 1
	p := start(b, cfg)
	deadline := time.Now().Add(30 * time.Second)
	for {
		snap, ok := p.Snapshot()
		switch {
		case !ok:
			b.Fatal("the pool stopped before its workers were up")
		case snap.Count(pool.Idle) == n:
			return p
		case time.Now().After(deadline):
			b.Fatalf("%d of %d workers idle after 30 s", snap.Count(pool.Idle), n)
		}
		time.Sleep(time.Millisecond)
	}
}

const benchRelayok = "relayok 192.0.2.1 host.example 25 127.0.0.1 25 NOQUEUE"

// BenchmarkDo is one command's round trip through the owner and a worker.
func BenchmarkDo(b *testing.B) {
	p := startBench(b, 1)
	req := pool.Request{Line: benchRelayok, Queue: true}
	b.ReportAllocs()
	cpu := cputime.Now()
	for b.Loop() {
		if r := p.Do(context.Background(), req); r.Err != nil || !strings.HasPrefix(string(r.Reply), "ok 1 ") {
			b.Fatalf("reply %q err %v", r.Reply, r.Err)
		}
	}
	cputime.Report(b, cpu)
}

// BenchmarkDoParallel: many clients sharing 8 workers (some queue).
func BenchmarkDoParallel(b *testing.B) {
	benchParallel(b, func(p *pool.Pool) func(pool.Request) bool {
		return func(req pool.Request) bool { return p.Do(context.Background(), req).Err == nil }
	})
}

// benchParallel runs 8 clients per processor against a pool of 8 workers;
// client makes a client's request function (true: answered).
func benchParallel(b *testing.B, client func(*pool.Pool) func(pool.Request) bool) {
	p := startBench(b, 8)
	req := pool.Request{Line: benchRelayok, Queue: true}
	b.ReportAllocs()
	b.SetParallelism(8)
	var failed atomic.Bool
	cpu := cputime.Now()
	b.RunParallel(func(pb *testing.PB) {
		do := client(p)
		for pb.Next() {
			if !do(req) {
				failed.Store(true)
			}
		}
	})
	cputime.Report(b, cpu)
	if failed.Load() {
		b.Fatal("a request failed")
	}
}

// BenchmarkSnapshotInto is what a status command (and `free`) costs the
// main socket: Owner.SnapshotInto on the owner goroutine, into one
// Snapshot kept for every poll, as internal/mux/front.go answers them.
// The whole loop runs inside one OnOwner call, so nothing crosses
// goroutines.
func BenchmarkSnapshotInto(b *testing.B) {
	p := startBench(b, 8)
	b.ReportAllocs()
	var snap pool.Snapshot
	slots := 0
	ran := make(chan struct{})
	b.ResetTimer()
	if !p.OnOwner(func(o *pool.Owner) {
		defer close(ran)
		for range b.N {
			o.SnapshotInto(&snap, nil)
		}
		slots = len(snap.Slots)
	}, func() { close(ran) }) {
		b.Fatal("the pool stopped")
	}
	<-ran
	b.StopTimer()
	if slots != 8 {
		b.Fatalf("the snapshot has %d slots, want 8", slots)
	}
}

// BenchmarkSnapshotViaInbox is Pool.Snapshot from another goroutine: a
// message through the owner's inbox, the snapshot taken there, and the
// caller woken with a fresh copy (what a status command costs on a
// connection goroutine, the restricted socket's, and the mux's status
// page; the main socket uses SnapshotInto on the owner).
func BenchmarkSnapshotViaInbox(b *testing.B) {
	p := startBench(b, 8)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := p.Snapshot(); !ok {
			b.Fatal("pool stopped")
		}
	}
}

// BenchmarkSubmitParallel is BenchmarkDoParallel through Submit: the
// owner reads every reply itself, and each client keeps one request in
// flight.
func BenchmarkSubmitParallel(b *testing.B) {
	benchParallel(b, func(p *pool.Pool) func(pool.Request) bool {
		done := make(chan pool.Result, 1)
		send := func(r pool.Result) { done <- r }
		return func(req pool.Request) bool { return p.Submit(req, send) && (<-done).Err == nil }
	})
}
