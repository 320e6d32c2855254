package governor

import (
	"context"
	"math"
	"testing"
	"time"

	"sluice/internal/limiter"
)

// pausedList is marks whose List, once armed, reads and then waits for
// release before it returns what it read.
type pausedList struct {
	limiter.Marks
	armed   bool
	entered chan struct{}
	release chan struct{}
}

func (p *pausedList) List(ctx context.Context) ([]limiter.KeyMark, error) {
	l, err := p.Marks.List(ctx)
	if p.armed {
		p.entered <- struct{}{}
		<-p.release
	}
	return l, err
}

// TestExemptionsRefreshRace: a Set and a Delete made while a Refresh is
// reading are not undone by what it read (the Set lost, the deleted
// exemption back until the next refresh).
func TestExemptionsRefreshRace(t *testing.T) {
	m, err := limiter.NewMemoryMarks("", nil)
	if err != nil {
		t.Fatal(err)
	}
	pl := &pausedList{Marks: m, entered: make(chan struct{}), release: make(chan struct{})}
	ex := NewExemptions(pl)
	r := &PolicyRule{Name: "out", Key: []KeyPart{{Attr: "sender"}}}
	ctx := context.Background()
	now := time.Now()
	if _, err := ex.Set(ctx, r, Exemption{Key: "sender=old@x", Through: true, Since: now}); err != nil {
		t.Fatal(err)
	}
	pl.armed = true
	done := make(chan error, 1)
	go func() { done <- ex.Refresh(ctx) }()
	<-pl.entered // the refresh has read the marks
	if _, err := ex.Set(ctx, r, Exemption{Key: "sender=new@x", Through: true, Since: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := ex.Delete(ctx, "out", "sender=old@x", now); err != nil {
		t.Fatal(err)
	}
	pl.release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, ok := ex.lookup("out", "sender=new@x", now); !ok {
		t.Error("an exemption set during a refresh was lost")
	}
	if _, ok := ex.lookup("out", "sender=old@x", now); ok {
		t.Error("an exemption deleted during a refresh came back")
	}
	pl.armed = false
	if err := ex.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if l, _ := ex.List(now); len(l) != 1 || l[0].Key != "sender=new@x" {
		t.Errorf("after the next refresh: %+v", l)
	}
}

// TestExemptionRaiseBounded: Set refuses a raise above MaxRaise; one read
// from the marks beyond it saturates the limit instead of overflowing it
// into a negative one.
func TestExemptionRaiseBounded(t *testing.T) {
	m, err := limiter.NewMemoryMarks("", nil)
	if err != nil {
		t.Fatal(err)
	}
	ex := NewExemptions(m)
	r := &PolicyRule{Name: "out", Key: []KeyPart{{Attr: "sender"}}, Limits: []limiter.Limit{lim("10/60s exact")}}
	ctx := context.Background()
	if _, err := ex.Set(ctx, r, Exemption{Key: "sender=a@x", Raise: MaxRaise + 1}); err == nil {
		t.Error("a raise above MaxRaise accepted")
	}
	if err := m.Put(ctx, "out\x00sender=a@x", MarkExempt, limiter.Mark{Value: math.MaxInt64}); err != nil {
		t.Fatal(err)
	}
	if err := ex.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	g := &Governor{exempt: ex, lim: limiter.New(limiter.Options{Store: nil})}
	eff := g.EffectiveLimits(r, "sender=a@x")
	if len(eff.Limits) != 1 || eff.Limits[0].N != math.MaxInt64 {
		t.Fatalf("raised by MaxInt64: %+v", eff.Limits)
	}
}
