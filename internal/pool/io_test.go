package pool_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"sluice/internal/pool"
)

// TestDoContextEndsMidRequest: a client whose context ends while its
// worker works gets ErrClosed at once; the worker's reply is still read
// (by the owner), so the worker goes back to idle, its request counted,
// and serves the next request normally.
func TestDoContextEndsMidRequest(t *testing.T) {
	cfg := baseConfig()
	cfg.MinWorkers, cfg.MaxWorkers = 1, 1
	p := start(t, cfg)
	waitStates(t, p, "I")
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan pool.Result, 1)
	go func() { res <- p.Do(ctx, pool.Request{Line: "sleep 1500", Queue: true}) }()
	busyPID(t, p)
	cancel()
	r := <-res
	if !errors.Is(r.Err, pool.ErrClosed) {
		t.Fatalf("cancelled request: reply %q err %v, want ErrClosed", r.Reply, r.Err)
	}
	// Do returned while the worker still works.
	if got := states(t, p); got != "B" {
		t.Fatalf("states %s after the cancelled Do returned, want B", got)
	}
	waitStates(t, p, "I")
	wantReply(t, do(t, p, "after"), "echo \"after\"\n")
	snap, _ := p.Snapshot()
	if n := snap.Slots[0].NumRequests; n != 2 {
		t.Fatalf("NumRequests %d, want 2 (the abandoned request finished on the worker)", n)
	}
}

// TestDoContextEndedBeforeGrant: a request whose client left while it was
// queued still runs when a worker frees up, and the pool stays in step.
func TestDoContextEndedBeforeGrant(t *testing.T) {
	cfg := baseConfig()
	cfg.MinWorkers, cfg.MaxWorkers, cfg.QueueSize = 1, 1, 4
	p := start(t, cfg)
	waitStates(t, p, "I")
	first := make(chan pool.Result, 1)
	go func() { first <- do(t, p, "sleep 200") }()
	busyPID(t, p)
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan pool.Result, 1)
	go func() { res <- p.Do(ctx, pool.Request{Line: "queued", Queue: true}) }()
	for {
		if snap, _ := p.Snapshot(); snap.Queued == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if r := <-res; !errors.Is(r.Err, pool.ErrClosed) {
		t.Fatalf("cancelled queued request: %+v", r)
	}
	wantReply(t, <-first, "slept 200\n")
	wantReply(t, do(t, p, "after"), "echo \"after\"\n")
	snap, _ := p.Snapshot()
	if n := snap.Slots[0].NumRequests; n != 3 {
		t.Fatalf("NumRequests %d, want 3", n)
	}
}

// A client whose context ends just as its worker's reply comes in leaves
// the worker usable: the next request on it is answered, not failed by a
// read deadline left over from the interruption.
func TestCancelRaceLeavesWorkerUsable(t *testing.T) {
	cfg := baseConfig()
	cfg.MinWorkers, cfg.MaxWorkers = 1, 1
	p := start(t, cfg)
	waitStates(t, p, "I")
	for i := range 300 {
		ctx, cancel := context.WithCancel(context.Background())
		// The worker answers after 2 ms; the cancel lands around then, on
		// either side of the reply.
		stop := time.AfterFunc(time.Duration(1500+i%20*50)*time.Microsecond, cancel)
		p.Do(ctx, pool.Request{Line: "sleep 2"})
		stop.Stop()
		cancel()
		waitStates(t, p, "I")
		if r := do(t, p, "after"); r.Err != nil || string(r.Reply) != "echo \"after\"\n" {
			t.Fatalf("round %d: the request after a cancelled one got %q, %v", i, r.Reply, r.Err)
		}
	}
}
