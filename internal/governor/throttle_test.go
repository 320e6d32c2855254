package governor

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"sluice/internal/hostmask"
	"sluice/internal/limiter"
	"sluice/internal/testutil/wait"
)

func throttleFixture(t *testing.T, ps ...ThrottlePolicy) *fixture {
	t.Helper()
	f := newFixture(t, nil, AnvilRules{})
	f.g.throttle = ThrottleRules{Policies: ps}
	return f
}

func relayPolicy() ThrottlePolicy {
	return ThrottlePolicy{Name: "relay", Match: []hostmask.Mask{hostmask.MustParse("*.verizon.net")}, Limit: lim("8/10s exact"), MaxWait: time.Hour}
}

func TestThrottleSlotsFIFOExact(t *testing.T) {
	f := throttleFixture(t, relayPolicy())
	var ats []time.Duration
	for range 20 {
		gr, err := f.g.ThrottleAcquire(f.ctx, "outgoing.verizon.net")
		if err != nil {
			t.Fatal(err)
		}
		ats = append(ats, gr.At.Sub(f.clk.Now()))
	}
	if !sort.SliceIsSorted(ats, func(i, j int) bool { return ats[i] < ats[j] }) {
		t.Fatalf("slots not in arrival order: %v", ats)
	}
	for i, at := range ats {
		if want := time.Duration(i/8) * 10 * time.Second; at != want {
			t.Fatalf("slot %d at %s, want %s (all %v)", i, at, want, ats)
		}
	}
	// Unmatched keys send at once.
	if gr, err := f.g.ThrottleAcquire(f.ctx, "mx.example.org"); err != nil || !gr.At.Equal(f.clk.Now()) {
		t.Fatalf("unthrottled key: %v %v", gr, err)
	}
}

func TestThrottleMaxWaitDefers(t *testing.T) {
	p := relayPolicy()
	p.MaxWait = 15 * time.Second
	f := throttleFixture(t, p)
	for i := range 16 {
		if _, err := f.g.ThrottleAcquire(f.ctx, "a.verizon.net"); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	_, err := f.g.ThrottleAcquire(f.ctx, "a.verizon.net")
	if !errors.Is(err, ErrDefer) {
		t.Fatalf("17th: %v, want ErrDefer", err)
	}
	t.Log(err)
}

func TestThrottleConcurrencyAndGiveBack(t *testing.T) {
	p := relayPolicy()
	p.Concurrency = 2
	f := throttleFixture(t, p)
	a, _ := f.g.ThrottleAcquire(f.ctx, "x.verizon.net")
	b, _ := f.g.ThrottleAcquire(f.ctx, "x.verizon.net")
	got := make(chan ThrottleGrant, 1)
	go func() {
		gr, err := f.g.ThrottleAcquire(f.ctx, "x.verizon.net")
		if err != nil {
			t.Error(err)
		}
		got <- gr
	}()
	wait.For(t, func() bool { return f.g.waiters.Waiting("throttle\x00c\x00relay\x00x.verizon.net") == 1 }, "the send to wait for its grant")
	select {
	case <-got:
		t.Fatal("third sender started while two were sending")
	case <-time.After(20 * time.Millisecond):
	}
	f.g.ThrottleDone(f.ctx, a, true)
	c := <-got
	f.g.ThrottleDone(f.ctx, b, true)
	f.g.ThrottleDone(f.ctx, c, true)
	if held, _ := f.g.lim.Held(f.ctx, "throttle\x00c\x00relay\x00x.verizon.net"); held != 0 {
		t.Fatalf("%d sessions leaked", held)
	}
	// A sender that gives up before its slot gives it back: with 8/10s,
	// 8 slots at 0 taken, then one at 10 s given back is reused.
	f2 := throttleFixture(t, relayPolicy())
	for range 8 {
		f2.g.ThrottleAcquire(f2.ctx, "y.verizon.net")
	}
	late, _ := f2.g.ThrottleAcquire(f2.ctx, "y.verizon.net")
	f2.g.ThrottleDone(f2.ctx, late, false)
	again, _ := f2.g.ThrottleAcquire(f2.ctx, "y.verizon.net")
	if !again.At.Equal(late.At) {
		t.Fatalf("given-back slot at %s not reused (got %s)", late.At, again.At)
	}
}

func TestThrottleSharedBudget(t *testing.T) {
	p := ThrottlePolicy{Name: "smarthost", Match: []hostmask.Mask{hostmask.MustParse("*")}, Limit: lim("2/10s exact"), MaxWait: time.Hour, Shared: true}
	f := throttleFixture(t, p)
	var ats []time.Duration
	for _, k := range []string{"a.example", "b.example", "192.0.2.1"} {
		gr, _ := f.g.ThrottleAcquire(f.ctx, k)
		ats = append(ats, gr.At.Sub(f.clk.Now()))
	}
	if ats[2] != 10*time.Second {
		t.Fatalf("shared budget slots %v", ats)
	}
}

// TestThrottleReload: a new limit applies from the next slot; slots
// already booked stay, so no burst gets through.
func TestThrottleReload(t *testing.T) {
	f := throttleFixture(t, relayPolicy())
	for range 8 {
		f.g.ThrottleAcquire(f.ctx, "r.verizon.net")
	}
	p := relayPolicy()
	p.Limit = lim("2/10s exact")
	g2 := New(Options{Limiter: f.g.lim, Classes: f.g.classes, Throttle: ThrottleRules{Policies: []ThrottlePolicy{p}}, Waiters: f.g.waiters, Logger: f.g.log})
	gr, _ := g2.ThrottleAcquire(f.ctx, "r.verizon.net")
	if d := gr.At.Sub(f.clk.Now()); d != 10*time.Second {
		t.Fatalf("after lowering the limit the next slot is at %s, want 10s", d)
	}
}

func TestThrottleCancelWhileWaiting(t *testing.T) {
	p := relayPolicy()
	p.Concurrency = 1
	f := throttleFixture(t, p)
	a, _ := f.g.ThrottleAcquire(f.ctx, "z.verizon.net")
	ctx, cancel := context.WithCancel(f.ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := f.g.ThrottleAcquire(ctx, "z.verizon.net")
		errc <- err
	}()
	wait.For(t, func() bool { return f.g.waiters.Waiting("throttle\x00c\x00relay\x00z.verizon.net") == 1 }, "the send to wait for its grant")
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("%v", err)
	}
	f.g.ThrottleDone(f.ctx, a, true)
	if b, err := f.g.ThrottleAcquire(f.ctx, "z.verizon.net"); err != nil {
		t.Fatal(err)
	} else {
		f.g.ThrottleDone(f.ctx, b, true)
	}
}

// TestThrottleClassQueueCap: XLA's queue threshold. The class's sessions,
// incoming (milter) and outgoing (throttle), share one count; outgoing
// sends stop at the queue cap: without a policy they defer at once, with
// one they wait in line and get the slot an incoming session frees.
func TestThrottleClassQueueCap(t *testing.T) {
	f := newFixture(t, []limiter.Class{
		{Name: "slow", Masks: []hostmask.Mask{hostmask.MustParse("*.slow.example")}, Refuse: 3, Queue: 2},
		{Name: "rest", Masks: []hostmask.Mask{hostmask.MustParse("*")}},
	}, AnvilRules{})
	f.g.throttle = ThrottleRules{Policies: []ThrottlePolicy{{Name: "paced", Match: []hostmask.Mask{hostmask.MustParse("paced.slow.example")},
		Limit: lim("100/1s exact"), MaxWait: time.Hour}}}

	var in MilterSession
	if a := f.g.MilterConnect(f.ctx, &in, "client.slow.example", dialup, "1"); a != "" {
		t.Fatal(a)
	}
	out1, err := f.g.ThrottleAcquire(f.ctx, "mx.slow.example")
	if err != nil {
		t.Fatalf("first outgoing session: %v", err)
	}
	// Two sessions (one each way) hold the queue cap: another send to the
	// class defers at once when no policy lets it wait.
	if _, err := f.g.ThrottleAcquire(f.ctx, "mx2.slow.example"); !errors.Is(err, ErrDefer) {
		t.Fatalf("third session without a policy: %v, want ErrDefer", err)
	}
	// Incoming sessions still go up to refuse (3).
	var in2 MilterSession
	if a := f.g.MilterConnect(f.ctx, &in2, "other.slow.example", dialup, "2"); a != "" {
		t.Fatalf("incoming within refuse: %q", a)
	}
	f.g.MilterClose(f.ctx, &in2)
	// Other classes are not held back.
	if _, err := f.g.ThrottleAcquire(f.ctx, "mx.example.org"); err != nil {
		t.Fatal(err)
	}
	// With a policy the send waits for a slot of the class ...
	got := make(chan error, 1)
	go func() {
		gr, err := f.g.ThrottleAcquire(f.ctx, "paced.slow.example")
		if err == nil {
			f.g.ThrottleDone(f.ctx, gr, true)
		}
		got <- err
	}()
	waitUntil(t, func() bool { return f.g.waiters.Waiting("class\x00slow") == 1 })
	// ... and gets the one the incoming session frees.
	f.g.MilterClose(f.ctx, &in)
	if err := <-got; err != nil {
		t.Fatalf("waiting send: %v", err)
	}
	f.g.ThrottleDone(f.ctx, out1, true)
	if n := f.held(t, "slow"); n != 0 {
		t.Fatalf("class holds %d sessions after all ended", n)
	}
}

// waitUntil polls cond (a state another goroutine reaches) for up to a minute.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for range 6000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not reached")
}
