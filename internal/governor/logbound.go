package governor

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"sluice/internal/clock"
)

// RefusalLog bounds the log lines of refusals under a flood. For each door,
// rule and key, the first refusal of a window is logged at INFO (with its
// count); later ones in that window are only counted, and one summary line,
// "N more refused in the last T" with the key an attribute (never inside
// the message, where a peer's text could pose as a field), follows when
// the window ends (or
// every SummaryEvery, for long windows). At debug level each refusal is
// logged as well. The exact per-request counts stay in the metrics.
//
// It outlives reloads (the daemon makes one); Run sends the summaries.
type RefusalLog struct {
	log *slog.Logger
	clk clock.Clock
	// MaxKeys caps the keys followed at once; refusals of further keys are
	// counted and reported in one line a second.
	maxKeys int

	mu       sync.Mutex
	runs     map[refusalKey]*refusalRun
	overflow int64
}

type refusalKey struct{ door, rule, key string }

type refusalRun struct {
	start, summarized time.Time
	window            time.Duration
	more              int64
}

// Bounds of the refusal log.
const (
	// SummaryEvery is the longest a count of refusals waits for its
	// summary line, however long the window.
	SummaryEvery = time.Minute
	// minRefusalWindow is the shortest window: at most one first line
	// per key and rule a second.
	minRefusalWindow = time.Second
	// DefaultRefusalKeys is how many keys are followed at once.
	DefaultRefusalKeys = 100_000
)

// NewRefusalLog returns a RefusalLog writing to log. clk tells the time
// (nil: the wall clock); maxKeys <= 0 means DefaultRefusalKeys.
func NewRefusalLog(log *slog.Logger, clk clock.Clock, maxKeys int) *RefusalLog {
	if clk == nil {
		clk = clock.Real{}
	}
	if maxKeys <= 0 {
		maxKeys = DefaultRefusalKeys
	}
	return &RefusalLog{log: log, clk: clk, maxKeys: maxKeys, runs: map[refusalKey]*refusalRun{}}
}

// Refused notes one refusal by door and rule of key, whose limit counts
// over window. msg and args make its log line.
func (r *RefusalLog) Refused(ctx context.Context, door, rule, key string, window time.Duration, msg string, args ...any) {
	if r == nil {
		return
	}
	if r.log.Enabled(ctx, slog.LevelDebug) {
		r.log.Debug(msg, args...)
	}
	window = max(window, minRefusalWindow)
	now := r.clk.Now()
	k := refusalKey{door, rule, key}
	r.mu.Lock()
	run := r.runs[k]
	if run != nil && now.Before(run.start.Add(run.window)) {
		run.more++
		r.mu.Unlock()
		return
	}
	if run != nil {
		r.summary(k, run, now) // the window ended; a new one begins
	} else if len(r.runs) >= r.maxKeys {
		r.overflow++
		r.mu.Unlock()
		return
	} else {
		run = &refusalRun{}
		r.runs[k] = run
	}
	run.start, run.summarized, run.window, run.more = now, now, window, 0
	r.mu.Unlock()
	r.log.Info(msg, args...)
}

// summary logs run's count of refusals since its last line, if any.
func (r *RefusalLog) summary(k refusalKey, run *refusalRun, now time.Time) {
	if run.more > 0 {
		since := now.Sub(run.summarized).Round(time.Second)
		r.log.Info(fmt.Sprintf("%s: %d more refused in the last %s", k.door, run.more, since),
			"rule", k.rule, "key", k.key, "refused", run.more, "in_last", since.String())
	}
	run.more, run.summarized = 0, now
}

// Flush logs the summaries that are due: of windows that ended, and of
// counts older than SummaryEvery. Run calls it every second.
func (r *RefusalLog) Flush() {
	now := r.clk.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, run := range r.runs {
		switch {
		case !now.Before(run.start.Add(run.window)):
			r.summary(k, run, now)
			delete(r.runs, k)
		case run.more > 0 && now.Sub(run.summarized) >= SummaryEvery:
			r.summary(k, run, now)
		}
	}
	if r.overflow > 0 {
		r.log.Info(fmt.Sprintf("%d more refusals of other keys not logged (over %d keys refused at once)", r.overflow, r.maxKeys), "refused", r.overflow)
		r.overflow = 0
	}
}

// Run flushes every second until ctx ends, then once more.
func (r *RefusalLog) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			r.flushAll()
			return
		case <-t.C:
			r.Flush()
		}
	}
}

// flushAll logs every pending count (at shutdown).
func (r *RefusalLog) flushAll() {
	now := r.clk.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, run := range r.runs {
		r.summary(k, run, now)
		delete(r.runs, k)
	}
}

// refused logs a refusal through the refusal log, or at once without one.
func (g *Governor) refused(ctx context.Context, door, rule, key string, window time.Duration, msg string, args ...any) {
	if g.refusals == nil {
		g.log.Info(msg, args...)
		return
	}
	g.refusals.Refused(ctx, door, rule, key, window, msg, args...)
}
