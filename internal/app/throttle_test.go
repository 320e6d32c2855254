package app

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"sluice/internal/clock"
	"sluice/internal/config"
	"sluice/internal/governor"
	"sluice/internal/limiter"
	"sluice/internal/store/memory"
)

// TestThrottleSharedFromConfig: what docs/config.md and docs/throttle.md
// say of [[throttle.policy]] shared, from the configuration text to the
// slots granted: with shared = true every key the policy matches books
// from one budget (the third key of a 2/10s policy waits a period); without
// it each key has its own (every key sends at once).
func TestThrottleSharedFromConfig(t *testing.T) {
	cfg, errs := config.Parse([]byte(`
[[throttle.policy]]
name = "smarthost"
match = ["*.relay.example"]
limit = "2/10s"
shared = true

[[throttle.policy]]
name = "each"
match = ["*"]
limit = "2/10s"
`), "shared.toml")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	store := memory.New(memory.Options{})
	t.Cleanup(func() { store.Close() })
	clk := clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	lim := limiter.New(limiter.Options{Store: store, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	log := slog.New(slog.DiscardHandler)
	g, err := buildGovernor(cfg, lim, limiter.NewWaiters(lim), governor.NewRefusalLog(log, clk.Now, 100), nil, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	wait := func(key string) time.Duration {
		t.Helper()
		gr, err := g.ThrottleAcquire(context.Background(), key)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return gr.At.Sub(clk.Now())
	}
	for _, key := range []string{"a.relay.example", "b.relay.example"} {
		if d := wait(key); d != 0 {
			t.Errorf("shared: %s waits %s, want none (the budget has room)", key, d)
		}
	}
	if d := wait("c.relay.example"); d < 10*time.Second {
		t.Errorf("shared: the third key waits %s, want a period (one budget for the policy)", d)
	}
	for _, key := range []string{"a.example", "a.example", "b.example", "c.example"} {
		if d := wait(key); d != 0 {
			t.Errorf("not shared: %s waits %s, want none (a budget per key)", key, d)
		}
	}
}
