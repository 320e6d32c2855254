package pool_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"sluice/internal/clock"
	"sluice/internal/pool"
)

// -L (StatusLogInterval) on a fake clock moved a second at a time, each
// step once the owner has armed its next timer (it has handled what the
// step before fired): the status events come at 5 s and 10 s from the
// start, none between.
func TestStatusLogInterval(t *testing.T) {
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t0 := fake.Now()
	var mu sync.Mutex
	var at []time.Duration
	cfg := baseConfig()
	cfg.Clock = fake
	cfg.StatusLogInterval = 5 * time.Second
	cfg.Events = func(ev pool.Event) {
		if ev.Kind == pool.EvStatus {
			mu.Lock()
			at = append(at, fake.Now().Sub(t0))
			mu.Unlock()
		}
	}
	start(t, cfg)
	armed := func() {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); fake.Timers() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the owner armed no timer")
			}
		}
	}
	for range 12 {
		armed()
		fake.Advance(time.Second)
	}
	armed()
	mu.Lock()
	defer mu.Unlock()
	if want := []time.Duration{5 * time.Second, 10 * time.Second}; !slices.Equal(at, want) {
		t.Fatalf("status events at %v from the start, want %v", at, want)
	}
}
