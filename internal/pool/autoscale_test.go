package pool_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"sluice/internal/clock"
	"sluice/internal/pool"
)

// scaleLog records the EvAutoscale events a pool reports, in 3.7.1's
// syslog words, and the reasons of its starts and kills.
type scaleLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *scaleLog) event(ev pool.Event) {
	var line string
	switch ev.Kind {
	case pool.EvAutoscale:
		line = fmt.Sprintf("autoscale %d running=%d ema=%.2f queued=%d", ev.Scale, ev.Running, ev.EMA, ev.Queued)
	case pool.EvStartWorker:
		line = fmt.Sprintf("start %d: %s", ev.Worker, ev.Reason)
	case pool.EvKillWorker:
		line = fmt.Sprintf("kill %d: %s", ev.Worker, ev.Reason)
	default:
		return
	}
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
}

func (l *scaleLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

// advanceSynced moves the fake clock by d, then waits until the pool's
// owner has run what fell due (it re-arms its one clock timer after
// running its timers) and has answered a snapshot after it.
func advanceSynced(t *testing.T, fake *clock.Fake, p *pool.Pool, d time.Duration) pool.Snapshot {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); fake.Timers() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the pool armed no timer")
		}
	}
	fake.Advance(d)
	for deadline := time.Now().Add(10 * time.Second); fake.Timers() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the pool did not re-arm its timer")
		}
	}
	sn, ok := p.Snapshot()
	if !ok {
		t.Fatal("the pool stopped")
	}
	return sn
}

// 3.7.1's decisions with -k (docs/protocols/mimedefang-multiplexor.md,
// "Autoscaling"), on a fake clock whose ticks fall half-way through a
// second (the start at 0.5 s): a request that finds no idle worker starts
// one at once (no tick needed) and that activation is a scale-out,
// reported with the average and the queue; the idle pool is scaled in
// only when more than 30 whole seconds of the clock (time_t arithmetic)
// separate the tick from that activation: not at 60.5 s for an
// activation at 30.2 s (30.3 s, but 60-30 = 30 whole seconds), at 75.5 s;
// the worker that goes is the head of the idle list, the one that was
// idle last.
func TestAutoscaleDecisions(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 500*int(time.Millisecond), time.UTC)
	fake := clock.NewFake(t0)
	log := &scaleLog{}
	cfg := baseConfig()
	cfg.Clock = fake
	cfg.MinWorkers, cfg.MaxWorkers = 1, 2
	cfg.BusyTimeout, cfg.CmdTimeout = time.Hour, time.Hour
	cfg.Autoscale = true
	cfg.Events = log.event
	p := start(t, cfg)
	waitCount(t, p, pool.Idle, 1)
	want := []string{
		"start 0: Bringing workers up to minWorkers (1)",
		"autoscale 1 running=1 ema=0.00 queued=0",
		"autoscale 0 running=0 ema=0.00 queued=0",
	}
	advanceSynced(t, fake, p, 15*time.Second) // tick at 15.5: all idle
	advanceSynced(t, fake, p, 14700*time.Millisecond)
	if got := log.get(); !slices.Equal(got, want) {
		t.Fatalf("before the requests:\n%q\nwant\n%q", got, want)
	}
	// 30.2 s: worker 0 busy, a second request starts worker 1 at once.
	slow := make(chan pool.Result, 1)
	go func() { slow <- do(t, p, "sleep 2000") }()
	waitCount(t, p, pool.Busy, 1)
	wantReply(t, do(t, p, "hello"), "echo \"hello\"\n")
	want = append(want, "start 1: About to execute command 'hello\n'", "autoscale 1 running=2 ema=0.00 queued=0")
	if got := log.get(); !slices.Equal(got, want) {
		t.Fatalf("after the second request (worker 0 still busy?):\n%q\nwant\n%q", got, want)
	}
	wantReply(t, <-slow, "slept 2000\n")
	// The worker that answers this one is the last to become idle.
	r := do(t, p, "pid")
	sn, _ := p.Snapshot()
	last := slices.IndexFunc(sn.Slots, func(s pool.SlotInfo) bool { return fmt.Sprintf("pid %d\n", s.PID) == string(r.Reply) })
	if last < 0 {
		t.Fatalf("pid reply %q matches no slot", r.Reply)
	}
	for _, d := range []time.Duration{300 * time.Millisecond, 15 * time.Second, 15 * time.Second} { // 30.5, 45.5, 60.5
		if sn := advanceSynced(t, fake, p, d); sn.Count(pool.Idle) != 2 || sn.EMABusy != 0 {
			t.Fatalf("at %v: %d idle, ema %f: scaled in within the cool-down", fake.Now().Sub(t0), sn.Count(pool.Idle), sn.EMABusy)
		}
	}
	advanceSynced(t, fake, p, 15*time.Second) // 75.5
	want = append(want, fmt.Sprintf("kill %d: Autoscale: scale-in (ema_busy=0.00)", last), "autoscale 2 running=2 ema=0.00 queued=0")
	if got := log.get(); !slices.Equal(got, want) {
		t.Fatalf("at 75.5 s:\n%q\nwant\n%q", got, want)
	}
}
