package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/control"
	"sluice/internal/limiter"
	"sluice/internal/throttle"
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

// TestThrottleNoBanSettingsNoMarks: a policy without ban settings reads
// no marks per request; an administrator's suspension defers its
// senders (the one waiting too) and a resume lets them through again.
func TestThrottleNoBanSettingsNoMarks(t *testing.T) {
	dir := t.TempDir()
	running := startDaemon(t, writeConfig(t, dir, fmt.Sprintf(`state_dir = %q
[anvil]
enabled = false
[policy]
enabled = false
[throttle]
listen = ["unix:throttle"]
[[throttle.policy]]
name = "relay"
match = ["relay.example"]
limit = "1000/1s"
concurrency = 1
max_wait = "1h"
`, dir)))
	// The running daemon's rules with a guard of the test's own (on
	// counted marks, its clock the test's to set), called directly.
	marks := newCountedMarks(t)
	d := &Daemon{log: running.log, metrics: running.metrics, throttleBan: newBanGuard(marks, running.log)}
	d.cfg.Store(running.cfg.Load())
	d.gov.Store(running.gov.Load())
	d.throttleBan.marks = marks
	h := throttleHandler{d}
	ctx := context.Background()
	gr, err := h.Acquire(ctx, "relay.example")
	if err != nil {
		t.Fatal(err)
	}
	if n := marks.gets.Load(); n != 0 {
		t.Fatalf("%d marks reads for a request of a policy without ban settings", n)
	}
	// The next sender waits for the one slot; a suspension defers it.
	res := make(chan error, 1)
	go func() {
		_, err := h.Acquire(ctx, "relay.example")
		res <- err
	}()
	eventuallyTrue(t, func() bool { return d.throttleWaiting.Load() == 1 }, "the sender waiting for its slot")
	if err := d.throttleBan.suspend(ctx, "relay relay.example", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	var de *throttle.DeferError
	if err := <-res; !asDefer(err, &de) {
		t.Fatalf("the waiting sender after the suspension: %v", err)
	}
	gr.Done(true)
	if _, err := h.Acquire(ctx, "relay.example"); !asDefer(err, &de) {
		t.Fatalf("a new sender while suspended: %v", err)
	}
	if _, err := d.throttleBan.resume(ctx, "relay relay.example"); err != nil {
		t.Fatal(err)
	}
	gets := marks.gets.Load()
	gr, err = h.Acquire(ctx, "relay.example")
	if err != nil {
		t.Fatalf("after the resume: %v", err)
	}
	gr.Done(true)
	if n := marks.gets.Load() - gets; n != 0 {
		t.Fatalf("%d marks reads after the resume", n)
	}
	// A suspension through the control socket ends by the guard's clock.
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	d.throttleBan.now = func() time.Time { return at }
	rep, err := controlHandler{d}.Handle(ctx, control.Peer{}, control.Request{Command: "throttle.suspend", Args: map[string]string{"key": "relay.example", "for": "1h"}})
	if err != nil || !strings.Contains(rep.Text, "suspended until 2030-01-02T04:04:05Z") {
		t.Fatalf("suspend by the guard's clock: %+v, %v", rep, err)
	}
}

func asDefer(err error, de **throttle.DeferError) bool {
	var x *throttle.DeferError
	ok := err != nil && errors.As(err, &x)
	*de = x
	return ok
}

// TestBanGuardLocksAndSnapshot: admit does not hold the key's lock
// across its marks read; prune skips a key whose lock is held instead of
// waiting for it; a refresh of the snapshot read before a suspension made
// here does not undo it.
func TestBanGuardLocksAndSnapshot(t *testing.T) {
	marks := newCountedMarks(t)
	g := newBanGuard(marks, slog.New(slog.DiscardHandler))
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
		if err := g.suspend(ctx, "p b", time.Now().Add(time.Hour)); err != nil {
			t.Error(err)
		}
		marks.release <- struct{}{}
	}()
	if err := g.refreshSuspended(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := g.suspendedSet().lookup("p b", time.Now()); !ok {
		t.Fatal("a refresh read before the suspension undid it")
	}
	if err := g.refreshSuspended(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := g.suspendedSet().lookup("p b", time.Now()); !ok {
		t.Fatal("the next refresh lost the suspension")
	}

	busy := g.key("p busy")
	busy.mu.Lock()
	defer busy.mu.Unlock()
	old := time.Now().Add(-2 * time.Hour)
	g.mu.Lock()
	busy.used = old
	for i := range 4096 {
		g.keys[fmt.Sprint("p ", i)] = &banKey{suspended: make(chan struct{}), used: old}
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
	g := newBanGuard(sharedCounted{marks}, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	const id = "relay relay.example"
	if err := g.suspend(ctx, id, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := g.resume(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := g.suspend(ctx, id, time.Now().Add(time.Hour)); err != nil {
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
	if _, err := g.resume(ctx, id); err != nil {
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
