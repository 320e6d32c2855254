package pool_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/internal/clock"
	"sluice/internal/pool"
	"sluice/internal/testutil/wait"
)

// recorder collects notifications and stats events from the owner
// goroutine.
type recorder struct {
	mu    sync.Mutex
	notes []string
	stats []pool.StatsEvent
}

func (r *recorder) notify(m string) { r.mu.Lock(); r.notes = append(r.notes, m); r.mu.Unlock() }

// notified is the notifications so far, joined with "|".
func (r *recorder) notified() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.notes, "|")
}

// startNotifying starts a pool of one worker whose notifications r
// records, and waits for the worker.
func startNotifying(t *testing.T, r *recorder) *pool.Pool {
	t.Helper()
	cfg := baseConfig()
	cfg.MinWorkers, cfg.MaxWorkers = 1, 1
	cfg.Notify = r.notify
	p := start(t, cfg)
	waitCount(t, p, pool.Idle, 1)
	return p
}
func (r *recorder) stat(e pool.StatsEvent) {
	r.mu.Lock()
	r.stats = append(r.stats, e)
	r.mu.Unlock()
}

// events returns a copy of the stats events so far.
func (r *recorder) events() []pool.StatsEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.stats)
}

func (r *recorder) has(event, extra string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.stats, func(e pool.StatsEvent) bool { return e.Event == event && e.Extra == extra })
}

// docs/protocols/mimedefang-multiplexor.md, "Ticks": each band ticks a worker with "tick <band>"; the reply is not a
// client's, and a tick never takes a busy worker or queues.
func TestTicks(t *testing.T) {
	cfg := baseConfig()
	cfg.MaxWorkers = 1
	cfg.Dir = t.TempDir()
	cfg.TickInterval = 100 * time.Millisecond
	cfg.TickBands = 2
	p := start(t, cfg)
	wantReply(t, do(t, p, "sleep 600"), "slept 600\n")
	log := filepath.Join(cfg.Dir, "ticks.log")
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(log)
		if strings.Contains(string(b), "tick 0\n") && strings.Contains(string(b), "tick 1\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ticks.log: %q", b)
		}
	}
	// The worker logs a tick before it answers it, and the pool counts a
	// request when the answer is in: wait for the count of the three.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		snap, _ := p.Snapshot()
		if snap.Msgs != 0 {
			t.Fatalf("msgs %d after ticks only, want 0", snap.Msgs)
		}
		if snap.Slots[0].NumRequests >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("requests %d, want the command and two ticks", snap.Slots[0].NumRequests)
		}
	}
}

// -k (docs/protocols/mimedefang-multiplexor.md, "Autoscaling") on a fake clock: a busy single worker raises the average
// above 0.80 after six 15 s periods and a second worker starts; idle
// again, it falls below 0.30 four periods later and one is stopped.
func TestAutoscale(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rec := &recorder{}
	cfg := baseConfig()
	cfg.Clock = fake
	cfg.BusyTimeout = time.Hour
	cfg.Autoscale = true
	cfg.Stats = rec.stat
	p := start(t, cfg)
	step := func() float64 {
		t.Helper()
		before, _ := p.Snapshot()
		wait.For(t, func() bool { return fake.Timers() > 0 }, "the pool's timer")
		fake.Advance(15 * time.Second)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			sn, _ := p.Snapshot()
			if sn.EMABusy != before.EMABusy {
				return sn.EMABusy
			}
			if time.Now().After(deadline) {
				t.Fatal("the autoscale timer did not run")
			}
		}
	}
	done := make(chan pool.Result, 1)
	go func() { done <- doReq(p, pool.Request{Line: "sleep 3000"}) }()
	waitCount(t, p, pool.Busy, 1)
	for range 5 {
		step()
	}
	if sn, _ := p.Snapshot(); sn.Activations != 1 {
		t.Fatalf("scaled out too early: ema %f", sn.EMABusy)
	}
	if ema := step(); ema <= 0.80 {
		t.Fatalf("ema %f after six busy periods", ema)
	}
	if !rec.has("StartWorker", `reason="Autoscale: scale-out (ema_busy=0.82)"`) {
		t.Errorf("no scale-out: %+v", rec.events())
	}
	wantReply(t, <-done, "slept 3000\n")
	for range 4 {
		step()
	}
	// The head of the idle list goes, as in 3.7.1: worker 0, idle since
	// its sleep ended, after worker 1 started idle.
	if !rec.has("KillWorker", `req=1 age=150 reason="Autoscale: scale-in (ema_busy=0.26)"`) {
		t.Errorf("no scale-in: %+v", rec.events())
	}
}

// The order of docs/protocols/mimedefang-multiplexor.md, "Busy timeout", for a busy timeout (client answered, then B, then the kill)
// and for a worker that dies (its EOF first, then U at the reap).
func TestNotificationOrder(t *testing.T) {
	rec := &recorder{}
	p := startNotifying(t, rec)
	if r := do(t, p, "hang"); r.Err != pool.ErrBusyTimeout {
		t.Fatalf("hang: %v", r.Err)
	}
	waitCount(t, p, pool.Idle, 1)
	if r := do(t, p, "die"); r.Err != pool.ErrNoResponse {
		t.Fatalf("die: %v", r.Err)
	}
	waitCount(t, p, pool.Stopped, 1)
	got := rec.notified()
	want := "S 0 StateChange Idle -> Busy|F 0|Z|S 0 hang|B|S 0 StateChange Busy -> Killed|Z|" +
		"S 0 StateChange Killed -> Stopped|F 1|Y|S 0 StateChange Stopped -> Idle|" +
		"S 0 StateChange Idle -> Busy|F 0|Z|S 0 die|S 0 StateChange Busy -> Idle|F 1|Y|U|S 0 StateChange Idle -> Stopped"
	if !strings.HasSuffix(got, want) {
		t.Errorf("notifications:\n got %s\nwant ...%s", got, want)
	}
}

// -i (docs/protocols/mimedefang-multiplexor.md, "Idle timeout") never takes the running workers below -m: with -m 1 -x 3,
// three workers busy at once and then idle for -i, the idle timer kills
// two ("Idle timeout", both with three running as the reference counts
// them) and keeps one; none is started again to make up for it. On a
// fake clock, so the timer runs exactly when the test says.
func TestIdleTimeoutKeepsMinWorkers(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rec := &recorder{}
	cfg := baseConfig()
	cfg.Clock = fake
	cfg.MinWorkers, cfg.MaxWorkers = 1, 3
	cfg.IdleTime = 10 * time.Second
	cfg.BusyTimeout = time.Hour
	cfg.SlewTime = time.Second
	cfg.Stats = rec.stat
	p := start(t, cfg)
	waitCount(t, p, pool.Idle, 1)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { wantReply(t, doReq(p, pool.Request{Line: "sleep 300"}), "slept 300\n") })
	}
	wg.Wait()
	waitCount(t, p, pool.Idle, 3)
	kills := func() (n int) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		for _, e := range rec.stats {
			if e.Event == "KillWorker" && e.Extra != "" && strings.Contains(e.Extra, `reason="Idle timeout"`) {
				n++
				if e.Running != 3 {
					t.Errorf("KillWorker with nworkers=%d, want 3", e.Running)
				}
			}
		}
		return n
	}
	for round := range 3 {
		fake.Advance(10 * time.Second)
		// The timer's pass has run once the pool answers a snapshot and
		// the idle workers it killed are reaped.
		waitCount(t, p, pool.Stopped, 2)
		waitCount(t, p, pool.Idle, 1)
		if n := kills(); n != 2 {
			t.Fatalf("round %d: %d idle kills, want 2", round, n)
		}
	}
	snap, _ := p.Snapshot()
	if snap.Activations != 3 {
		t.Errorf("%d activations, want 3 (no worker started again after the idle kills)", snap.Activations)
	}
}

// A reaped worker's slot keeps its last command kind until its next
// activation, as the reference's last_cmd does (`workers` shows
// "last=relayok" on the stopped slot).
func TestLastKindSurvivesReap(t *testing.T) {
	cfg := baseConfig()
	cfg.MaxRequests = 1
	cfg.SlewTime = time.Hour // no bring-up during the test
	p := start(t, cfg)
	wantReply(t, do(t, p, "relayok 192.0.2.1 host 25"), "ok 1 ok 250 2.1.0 0\n")
	waitStates(t, p, "SS")
	snap, _ := p.Snapshot()
	if got := snap.Slots[0].Last; got != pool.RelayOK {
		t.Errorf("stopped slot's last kind %v, want relayok", got)
	}
}

// A bare "scan " is counted as a scan but takes the reference's generic
// command path: no StartFilter record, the generic activation reason.
// "scan Q1 /tmp" takes the scan path.
func TestBareScanIsGeneric(t *testing.T) {
	rec := &recorder{}
	cfg := baseConfig()
	cfg.MinWorkers, cfg.MaxWorkers = 1, 1
	cfg.Stats = rec.stat
	p := start(t, cfg)
	waitStates(t, p, "I")
	wantReply(t, do(t, p, "scan "), "ok\n")
	if rec.has("StartFilter", "") {
		t.Errorf("bare scan wrote StartFilter: %+v", rec.events())
	}
	if snap, _ := p.Snapshot(); snap.Msgs != 1 {
		t.Errorf("msgs %d after a bare scan, want 1", snap.Msgs)
	}
	wantReply(t, do(t, p, "scan Q1 /tmp"), "ok\n")
	if !rec.has("StartFilter", "") {
		t.Errorf("scan Q1 /tmp wrote no StartFilter: %+v", rec.events())
	}
}

// -W counts whole seconds of the clock, as the reference's time(NULL)
// difference does: after an activation at 0.9 s, none at 0.9 s, one at
// 1.1 s (0.2 s later, but in the next second).
func TestActivationSpacingWholeSeconds(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 900_000_000, time.UTC))
	cfg := baseConfig()
	cfg.Clock = fake
	cfg.BusyTimeout = time.Hour
	cfg.ActivationSpacing = time.Second
	p := start(t, cfg)
	waitStates(t, p, "IS")
	done := make(chan pool.Result, 1)
	go func() { done <- doReq(p, pool.Request{Line: "sleep 1500"}) }()
	waitCount(t, p, pool.Busy, 1)
	if r := do(t, p, "x"); !errors.Is(r.Err, pool.ErrActivate) {
		t.Fatalf("in the same second: %+v", r)
	}
	fake.Advance(200 * time.Millisecond)
	wantReply(t, do(t, p, "x"), "echo \"x\"\n")
	wantReply(t, <-done, "slept 1500\n")
}
