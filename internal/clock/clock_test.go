package clock

import (
	"testing"
	"time"
)

func TestFake(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(t0)
	a := f.NewTimer(10 * time.Second)
	b := f.NewTimer(20 * time.Second)
	now := f.NewTimer(0)
	select {
	case <-now.C():
	default:
		t.Fatal("a zero timer must fire at once")
	}
	if f.Timers() != 2 {
		t.Fatalf("%d timers", f.Timers())
	}
	f.Advance(10 * time.Second)
	select {
	case got := <-a.C():
		if !got.Equal(t0.Add(10 * time.Second)) {
			t.Fatalf("fired at %s", got)
		}
	default:
		t.Fatal("timer a did not fire")
	}
	if !b.Stop() || b.Stop() {
		t.Fatal("Stop must report whether the timer was pending")
	}
	f.Set(t0.Add(time.Hour))
	select {
	case <-b.C():
		t.Fatal("a stopped timer fired")
	default:
	}
	if !f.Now().Equal(t0.Add(time.Hour)) {
		t.Fatalf("now %s", f.Now())
	}
}

func TestReal(t *testing.T) {
	var c Clock = Real{}
	tm := c.NewTimer(time.Millisecond)
	<-tm.C()
	if c.Now().IsZero() || tm.Stop() {
		t.Fatal("real clock")
	}
}

// TestNow: clock.Now carries the monotonic clock's exact reading and the
// wall clock's, and a wall clock step shows within a second.
func TestNow(t *testing.T) {
	before := time.Now()
	n := Now()
	after := time.Now()
	if n.Before(before) || n.After(after) {
		t.Fatalf("Now() = %v, not between %v and %v", n, before, after)
	}
	if n == n.Round(0) {
		t.Fatalf("Now() = %v has no monotonic reading", n)
	}
	if w := n.Round(0); w.Before(before.Round(0).Add(-time.Millisecond)) || w.After(after.Round(0).Add(time.Millisecond)) {
		t.Fatalf("Now()'s wall reading %v, not between %v and %v", w, before.Round(0), after.Round(0))
	}
	// A wall clock that read an hour ahead half a second ago (a step the
	// anchor has not seen yet): Now shows it, on the exact monotonic time.
	step := time.Now()
	anchor.Store(&wallAnchor{t: step.Add(-500 * time.Millisecond).Round(0).Add(time.Hour), mono: MonoOf(step) - 500*time.Millisecond})
	if got := Now().Round(0).Sub(time.Now().Round(0)); got < time.Hour-time.Second || got > time.Hour+time.Second {
		t.Fatalf("with an anchor an hour ahead, Now() is %v ahead of time.Now(); want about an hour", got)
	}
	// The same anchor a second or more old: Now reads the wall clock again.
	anchor.Store(&wallAnchor{t: step.Add(-time.Second).Round(0).Add(time.Hour), mono: MonoOf(step) - time.Second})
	if got := Now().Round(0).Sub(time.Now().Round(0)); got < -time.Second || got > time.Second {
		t.Fatalf("with an anchor over a second old, Now() is %v from time.Now(); want the wall clock", got)
	}
	if a, b := Now(), Now(); b.Sub(a) < 0 {
		t.Fatalf("Now() went back: %v then %v", a, b)
	}
}
