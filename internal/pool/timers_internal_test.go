package pool

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"sluice/internal/clock"
)

// TestTimersFireInOrder: timers armed at random times for random
// durations, some moved and some cancelled, fire in the order of their
// deadlines, each once, and only when due.
func TestTimersFireInOrder(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC))
	p := &Pool{clk: clk}
	rng := rand.New(rand.NewPCG(1, 2))
	type armed struct {
		e    *timerEntry
		when time.Time
	}
	var live []*armed
	var fired []time.Time
	for range 500 {
		clk.Advance(time.Duration(rng.IntN(5)) * time.Millisecond)
		switch op := rng.IntN(10); {
		case op < 6 || len(live) == 0:
			a := &armed{}
			a.e = p.after(time.Duration(rng.IntN(2000))*time.Millisecond, func() { fired = append(fired, a.when) })
			a.when = p.when(a.e)
			live = append(live, a)
		case op < 8:
			a := live[rng.IntN(len(live))]
			p.schedule(a.e, time.Duration(rng.IntN(2000))*time.Millisecond)
			a.when = p.when(a.e)
		default:
			i := rng.IntN(len(live))
			live[i].e.cancel(p)
			live = slices.Delete(live, i, i+1)
		}
		p.fireTimers()
		for _, w := range fired {
			if w.After(clk.Now()) {
				t.Fatalf("a timer due at %v fired at %v", w, clk.Now())
			}
		}
		live = slices.DeleteFunc(live, func(a *armed) bool { return a.e.index < 0 })
	}
	n := len(fired)
	clk.Advance(time.Hour)
	p.fireTimers()
	if len(p.timers) != 0 {
		t.Fatalf("%d timers left after every deadline passed", len(p.timers))
	}
	if !slices.IsSortedFunc(fired[n:], func(a, b time.Time) int { return a.Compare(b) }) {
		t.Fatal("the timers left fired out of their deadlines' order")
	}
	if len(fired) < 100 {
		t.Fatalf("only %d timers fired", len(fired))
	}
}
