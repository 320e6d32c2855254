package governor

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"sluice/internal/clock"
)

// Bounds of the throttle summary.
const (
	// maxTallyKeys caps the destinations counted apart in one period;
	// the rest are counted together as "other keys".
	maxTallyKeys = 4096
	// tallyTop is how many destinations the summary line names.
	tallyTop = 10
)

// ThrottleTally counts the throttle's grants and deferrals per key
// (destination), for a summary at info every SummaryEvery:
// grants are otherwise invisible at info, and deferrals are logged once
// per key and minute. Its memory is bounded (maxTallyKeys) and an idle
// period logs nothing.
type ThrottleTally struct {
	clock clock.Clock
	mu    sync.Mutex
	keys  map[string]*tally
	other tally // keys past maxTallyKeys
	since time.Time
}

type tally struct{ granted, deferred int64 }

// NewThrottleTally returns a tally whose first period starts now by clk.
func NewThrottleTally(clk clock.Clock) *ThrottleTally {
	return &ThrottleTally{clock: clk, keys: map[string]*tally{}, since: clk.Now()}
}

// Add counts one grant (granted) or deferral of key (nil: no tally).
func (t *ThrottleTally) Add(key string, granted bool) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.keys[key]
	if c == nil {
		if len(t.keys) >= maxTallyKeys {
			c = &t.other
		} else {
			c = &tally{}
			t.keys[key] = c
		}
	}
	if granted {
		c.granted++
	} else {
		c.deferred++
	}
}

// report logs one line for the period since the last report, and starts
// the next period: the totals, how many keys, and the tallyTop busiest
// keys with their grants and deferrals. Nothing when the throttle had no
// request.
func (t *ThrottleTally) report(log *slog.Logger, now time.Time) {
	t.mu.Lock()
	keys, other, since := t.keys, t.other, t.since
	t.keys, t.other, t.since = map[string]*tally{}, tally{}, now
	t.mu.Unlock()
	if len(keys) == 0 && other == (tally{}) {
		return
	}
	type row struct {
		key string
		tally
	}
	rows := make([]row, 0, len(keys))
	total := other
	for k, c := range keys {
		rows = append(rows, row{k, *c})
		total.granted += c.granted
		total.deferred += c.deferred
	}
	slices.SortFunc(rows, func(a, b row) int {
		if c := cmp.Compare(b.granted+b.deferred, a.granted+a.deferred); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})
	var top []string
	for _, r := range rows[:min(len(rows), tallyTop)] {
		top = append(top, fmt.Sprintf("%s %d/%d", r.key, r.granted, r.deferred))
	}
	args := []any{"period", now.Sub(since).Round(time.Second).String(), "granted", total.granted, "deferred", total.deferred,
		"keys", len(keys), "top", strings.Join(top, ", ")}
	if other != (tally{}) {
		args = append(args, "other_keys_granted", other.granted, "other_keys_deferred", other.deferred)
	}
	log.Info("throttle summary: grants/deferrals per key, busiest first", args...)
}

// Run reports every SummaryEvery until ctx ends, then once more.
func (t *ThrottleTally) Run(ctx context.Context, log *slog.Logger) {
	tk := time.NewTicker(SummaryEvery)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			t.report(log, t.clock.Now())
			return
		case <-tk.C:
			t.report(log, t.clock.Now())
		}
	}
}
