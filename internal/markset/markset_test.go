package markset

import (
	"context"
	"testing"
	"time"

	"sluice/internal/clock"
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

func decodeValue(k limiter.KeyMark) (int64, bool) { return k.Value, k.Value != 0 }

// TestSet: a refresh reads the marks of its name only, drops the expired
// ones and those decode refuses; a Put and a Delete made while a refresh
// is reading are not undone by what it read; OnChange hears the new
// snapshot.
func TestSet(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewFake(t0)
	m, err := limiter.NewMemoryMarks("", clk)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, x := range []struct {
		key, name string
		mark      limiter.Mark
	}{
		{"a", "n", limiter.Mark{Value: 1}},
		{"b", "n", limiter.Mark{Value: 2, Expires: t0.Add(time.Minute)}},
		{"c", "other", limiter.Mark{Value: 3}},
		{"d", "n", limiter.Mark{Value: 0}},
	} {
		if err := m.Put(ctx, x.key, x.name, x.mark); err != nil {
			t.Fatal(err)
		}
	}
	pl := &pausedList{Marks: m, entered: make(chan struct{}), release: make(chan struct{})}
	s := New(pl, "n", decodeValue, clk)
	seen := make(chan struct{})
	stop := s.OnChange(func(snap *Snapshot[int64]) bool {
		if _, ok := snap.Get("new"); ok {
			close(seen)
			return true
		}
		return false
	})
	defer stop()
	if err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	snap := s.Load()
	if v, ok := snap.Get("a"); snap.Len() != 2 || !ok || v != 1 {
		t.Fatalf("after a refresh: %d keys, a=%d", snap.Len(), v)
	}
	if s.Read() != t0 {
		t.Errorf("read at %v, want %v", s.Read(), t0)
	}
	clk.Advance(time.Minute) // b expires
	pl.armed = true
	done := make(chan error, 1)
	go func() { done <- s.Refresh(ctx) }()
	<-pl.entered // the refresh has read the marks
	s.Put("new", 7)
	s.Delete("a")
	pl.release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Load().Get("new"); !ok {
		t.Error("a Put during a refresh was lost")
	}
	if _, ok := s.Load().Get("a"); ok {
		t.Error("a Delete during a refresh was undone")
	}
	// OnChange hands f the newest snapshot when one is replaced: wait for
	// it before the next Refresh reads the marks, which do not hold "new"
	// (this test never wrote it there), so the snapshot after it does not.
	select {
	case <-seen:
	case <-time.After(10 * time.Second):
		t.Fatal("OnChange did not hear the snapshot holding the Put")
	}
	pl.armed = false
	if err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Load().Get("b"); ok {
		t.Error("an expired mark was read")
	}
}
