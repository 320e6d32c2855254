package redis

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/internal/limiter"
	"sluice/internal/testutil/logbuf"
)

// The breaker's states, step by step, on a clock of the test's own.
func TestBreakerStates(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	b := breaker{after: 3, span: 100 * time.Millisecond, probe: time.Second}
	enter := func(at time.Time, wantOK, wantProbe bool) {
		t.Helper()
		if ok, probe := b.enter(at); ok != wantOK || probe != wantProbe {
			t.Fatalf("enter at +%s: ok %v probe %v, want %v %v", at.Sub(t0), ok, probe, wantOK, wantProbe)
		}
	}
	// Two misses, an answer, two misses: never three in a row.
	for _, miss := range []bool{true, true, false, true, true} {
		enter(t0, true, false)
		if miss && b.missed(false, t0) {
			t.Fatal("opened before three misses in a row")
		}
		if !miss && b.answered(false) {
			t.Fatal("an answer while closed reported a close")
		}
	}
	// Three misses in a row, but all at once (one stall timing out every
	// call in flight): not yet.
	enter(t0, true, false)
	if b.missed(false, t0.Add(99*time.Millisecond)) {
		t.Fatal("opened by misses within less than the span")
	}
	enter(t0, true, false)
	if !b.missed(false, t0.Add(100*time.Millisecond)) {
		t.Fatal("the fourth miss in a row, a span after the first, did not open it")
	}
	// A call that was in flight misses too: no second trip.
	if b.missed(false, t0) {
		t.Fatal("opened twice")
	}
	enter(t0.Add(1099*time.Millisecond), false, false)
	enter(t0.Add(1100*time.Millisecond), true, true)
	// While the probe is out, everyone else fails at once.
	enter(t0.Add(1500*time.Millisecond), false, false)
	b.missed(true, t0.Add(2*time.Second))
	enter(t0.Add(2500*time.Millisecond), false, false)
	enter(t0.Add(3*time.Second), true, true)
	// The probe's caller gave up: the next call probes at once.
	b.abandoned(true)
	enter(t0.Add(3*time.Second), true, true)
	if !b.answered(true) {
		t.Fatal("the probe's answer did not close it")
	}
	enter(t0.Add(3*time.Second), true, false)
	if st := (BreakerState{Open: b.open.Load(), Trips: b.trips.Load(), FastFails: b.fastFails.Load()}); st != (BreakerState{Trips: 1, FastFails: 3}) {
		t.Fatalf("state %+v", st)
	}
	// An answer to a call sent before it opened closes it too.
	for i := range 3 {
		b.missed(false, t0.Add(time.Duration(i)*time.Second))
	}
	if !b.open.Load() || !b.answered(false) || b.open.Load() {
		t.Fatal("a late answer did not close it")
	}
	// after = 0: it never opens.
	off := breaker{after: 0, probe: time.Second}
	for range 10 {
		if off.missed(false, t0) {
			t.Fatal("a breaker with after = 0 opened")
		}
	}
}

// A redis-server stopped by SIGSTOP: after the first misses, decisions
// go by the fail mode at once (ErrCircuitOpen, counted by Breaker), only
// the probes wait for the deadline, and after SIGCONT a probe closes the
// circuit and counting goes on where it was.
func TestBreakerUnderStoppedRedis(t *testing.T) {
	srv := privateServer(t)
	logs := &logbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	const (
		deadline = 100 * time.Millisecond
		probe    = 200 * time.Millisecond
		workers  = 8
	)
	s := newTestStore(t, srv, Options{Deadline: deadline, BreakAfter: 3, ProbeInterval: probe, Logger: log})
	lim := limiter.New(limiter.Options{Store: s, FailOpen: true, Logger: log})
	c := []limiter.Check{exactCheck("brk", 1000, time.Hour)}
	hit := func() (limiter.Decision, error) {
		out := make([]limiter.Decision, 1)
		err := lim.Hit(ctx, 1, limiter.Leaky, c, out)
		return out[0], err
	}
	if d, err := hit(); err != nil || d.Count != 1 {
		t.Fatalf("before: %+v %v", d, err)
	}
	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = srv.Signal(syscall.SIGCONT)
		}
	}()
	var (
		mu                  sync.Mutex
		fast, missed, other int
		admitted, decisions int
		wg                  sync.WaitGroup
		start               = time.Now()
		run                 = 1500 * time.Millisecond
	)
	for range workers {
		wg.Go(func() {
			for time.Since(start) < run {
				d, err := hit()
				mu.Lock()
				decisions++
				if d.Allowed {
					admitted++
				}
				switch {
				case errors.Is(err, ErrCircuitOpen):
					if ff, ok := errors.AsType[interface {
						error
						FastFail() bool
					}](err); !ok || !ff.FastFail() {
						t.Errorf("%v does not say it failed fast (for the metrics)", err)
					}
					fast++
				case err != nil:
					// A deadline, or the client's own trouble with a
					// connection that stopped answering: it went to Redis.
					missed++
					if !errors.Is(err, context.DeadlineExceeded) {
						other++
					}
				default:
					t.Errorf("a decision with Redis stopped: %+v", d)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	st := s.Breaker()
	if !st.Open || st.Trips != 1 {
		t.Fatalf("breaker %+v after %s of a stopped Redis, want open, one trip", st, elapsed)
	}
	if uint64(fast) != st.FastFails || fast == 0 {
		t.Fatalf("%d decisions failed at once, the breaker counted %d", fast, st.FastFails)
	}
	// Only the waves before the breaker opened (one call per worker in
	// flight at the stop; the next, sent after the first misses, whose
	// misses open it a deadline later; and, on a loaded machine, calls of a
	// third sent just before that) and the probes (one per interval
	// elapsed) went to Redis: a breaker that never opened would send every
	// decision, about run/deadline per worker.
	if maxMissed := 3*workers + int(elapsed/probe) + 1; missed > maxMissed {
		t.Fatalf("%d decisions waited for the deadline, want at most %d (%d workers, probes every %s over %s); %d failed at once",
			missed, maxMissed, workers, probe, elapsed, fast)
	}
	if admitted != decisions {
		t.Fatalf("fail mode open: %d of %d decisions admitted", admitted, decisions)
	}
	if len(logs.Lines("circuit open")) == 0 {
		t.Fatalf("no log line says the circuit opened:\n%s", logs)
	}
	t.Logf("stopped Redis, %s: %d decisions, %d by the fail mode at once, %d went to Redis (%d of them failed other than by the deadline)", elapsed, decisions, fast, missed, other)
	// A lease refused at once was never sent: nothing to give back later.
	orphans := func() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.orphans) }
	for i := 0; ; i++ {
		before := orphans()
		_, _, _, err := s.Acquire(ctx, time.Now(), "brk-lease", 5, 0)
		if errors.Is(err, ErrCircuitOpen) {
			if after := orphans(); after > before {
				t.Fatalf("an acquisition the breaker refused left an orphan to release (%d, was %d)", after, before)
			}
			break
		}
		if i == 10 {
			t.Fatalf("10 acquisitions, none refused at once by the open circuit: %v", err)
		}
	}

	if err := srv.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	var d limiter.Decision
	var err error
	for begin := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if d, err = hit(); err == nil {
			break
		}
		if time.Since(begin) > 20*time.Second {
			t.Fatalf("still failing 20 s after SIGCONT: %v", err)
		}
	}
	if st := s.Breaker(); st.Open || st.Trips != 1 {
		t.Fatalf("breaker %+v after Redis answered", st)
	}
	if len(logs.Lines("circuit closed")) == 0 {
		t.Fatalf("no log line says the circuit closed:\n%s", logs)
	}
	// Counting went on from the count before the stop (plus what the
	// timed-out calls applied once Redis ran again), not from zero.
	if d.Count < 2 || d.Count > int64(2+missed) {
		t.Fatalf("count after recovery %d, want 2 to %d", d.Count, 2+missed)
	}
}
