package ban

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/clock"
	"sluice/internal/limiter"
)

// countedMarks counts the reads of the marks; with block set, a Get or
// List signals entered and waits for release before it returns (the
// List with what it read before).
type countedMarks struct {
	limiter.Marks
	gets, lists atomic.Int64
	block       atomic.Bool
	entered     chan struct{}
	release     chan struct{}
}

func newCountedMarks(t *testing.T) *countedMarks {
	t.Helper()
	m, err := limiter.NewMemoryMarks("", nil)
	if err != nil {
		t.Fatal(err)
	}
	return &countedMarks{Marks: m, entered: make(chan struct{}), release: make(chan struct{})}
}

func (c *countedMarks) wait() {
	if c.block.Load() {
		c.entered <- struct{}{}
		<-c.release
	}
}

func (c *countedMarks) Get(ctx context.Context, key, name string) (limiter.Mark, bool, error) {
	c.gets.Add(1)
	m, ok, err := c.Marks.Get(ctx, key, name)
	c.wait()
	return m, ok, err
}

func (c *countedMarks) List(ctx context.Context) ([]limiter.KeyMark, error) {
	c.lists.Add(1)
	l, err := c.Marks.List(ctx)
	c.wait()
	return l, err
}

// TestBanGuardLocksAndSnapshot: admit does not hold the key's lock
// across its marks read; prune skips a key whose lock is held instead of
// waiting for it; a refresh of the snapshot read before a suspension made
// here does not undo it.
func TestBanGuardLocksAndSnapshot(t *testing.T) {
	marks := newCountedMarks(t)
	g := NewGuard(marks, slog.New(slog.DiscardHandler), clock.Real{})
	ctx := context.Background()
	marks.block.Store(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.admit(ctx, "p a")
	}()
	<-marks.entered
	if !g.key("p a").mu.TryLock() {
		t.Error("admit holds the key's lock across its marks read")
	} else {
		g.key("p a").mu.Unlock()
	}
	marks.release <- struct{}{}
	<-done

	go func() {
		defer close(marks.release)
		<-marks.entered // the refresh has read the marks
		marks.block.Store(false)
		if err := g.Suspend(ctx, "p b", time.Now().Add(time.Hour)); err != nil {
			t.Error(err)
		}
		marks.release <- struct{}{}
	}()
	if err := g.RefreshSuspended(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := lookup(g.susp.Load(), "p b", time.Now()); !ok {
		t.Fatal("a refresh read before the suspension undid it")
	}
	if err := g.RefreshSuspended(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := lookup(g.susp.Load(), "p b", time.Now()); !ok {
		t.Fatal("the next refresh lost the suspension")
	}

	busy := g.key("p busy")
	busy.mu.Lock()
	defer busy.mu.Unlock()
	old := time.Now().Add(-2 * time.Hour)
	g.mu.Lock()
	busy.used = old
	for i := range 4096 {
		g.keys[fmt.Sprint("p ", i)] = &keyState{suspended: make(chan struct{}), used: old}
	}
	g.mu.Unlock()
	g.key("p new") // prunes, skipping the busy key
	g.mu.Lock()
	n := len(g.keys)
	g.mu.Unlock()
	if n != 4 {
		t.Fatalf("%d keys after a prune", n)
	}
}

// sharedCounted is countedMarks that says it is shared (as Redis's are).
type sharedCounted struct{ *countedMarks }

func (sharedCounted) Shared() bool { return true }

// TestPollDoesNotUndoResume: a poll that read the suspension mark just
// before an administrator's resume deleted it does not suspend the key
// again afterwards.
func TestPollDoesNotUndoResume(t *testing.T) {
	marks := newCountedMarks(t)
	g := NewGuard(sharedCounted{marks}, slog.New(slog.DiscardHandler), clock.Real{})
	ctx := context.Background()
	const id = "relay relay.example"
	if err := g.Suspend(ctx, id, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Resume(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := g.Suspend(ctx, id, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	k := g.key(id)
	k.mu.Lock()
	k.watchers++
	k.mu.Unlock()
	marks.block.Store(true)
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.pollOnce(id, k)
	}()
	<-marks.entered // the poll has read the mark
	marks.block.Store(false)
	if _, err := g.Resume(ctx, id); err != nil {
		t.Fatal(err)
	}
	marks.release <- struct{}{}
	<-done
	// Its waiting senders are not told to defer.
	k.mu.Lock()
	suspended, until := isClosed(k.suspended), k.until
	k.mu.Unlock()
	if suspended || !until.IsZero() {
		t.Fatalf("the key is suspended here after the resume (until %v)", until)
	}
}
