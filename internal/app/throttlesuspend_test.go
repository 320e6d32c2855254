package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/ban"
	"sluice/internal/clock"
	"sluice/internal/control"
	"sluice/internal/limiter"
	"sluice/internal/throttle"
)

// countedMarks counts the reads of the marks.
type countedMarks struct {
	limiter.Marks
	gets atomic.Int64
}

func newCountedMarks(t *testing.T) *countedMarks {
	t.Helper()
	m, err := limiter.NewMemoryMarks("", nil)
	if err != nil {
		t.Fatal(err)
	}
	return &countedMarks{Marks: m}
}

func (c *countedMarks) Get(ctx context.Context, key, name string) (limiter.Mark, bool, error) {
	c.gets.Add(1)
	return c.Marks.Get(ctx, key, name)
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
	clk := clock.NewFake(time.Now())
	d := &Daemon{log: running.log, metrics: running.metrics, throttleBan: ban.NewGuard(marks, running.log, clk)}
	d.cfg.Store(running.cfg.Load())
	d.gov.Store(running.gov.Load())
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
	if err := d.throttleBan.Suspend(ctx, "relay relay.example", time.Now().Add(time.Hour)); err != nil {
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
	if _, err := d.throttleBan.Resume(ctx, "relay relay.example"); err != nil {
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
	clk.Set(at)
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
