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
