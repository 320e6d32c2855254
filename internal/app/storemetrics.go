package app

import (
	"context"
	"errors"
	"time"

	"sluice/internal/clock"
	"sluice/internal/limiter"
	"sluice/internal/metrics"
)

// instrumentedStore times every store operation for the metrics. An
// operation's start is the now the limiter read just before it (see
// opStart), so that timing it costs one clock read, not two.
type instrumentedStore struct {
	limiter.Store
	m *metrics.Metrics
}

// opStart is the Mono reading of an operation's now: the limiter's clock
// reading just before the call, monotonic as time.Now's is. A now
// without a monotonic reading (a clock that is not the real one) cannot
// say when the call began: the clock is read instead.
func opStart(now time.Time) time.Duration {
	if now == now.Round(0) {
		return clock.Mono()
	}
	return clock.MonoOf(now)
}

func (s instrumentedStore) Hit(ctx context.Context, now time.Time, n int64, mode limiter.Mode, checks []limiter.Check, out []limiter.Decision) error {
	t := opStart(now)
	err := s.Store.Hit(ctx, now, n, mode, checks, out)
	s.m.StoreOp("hit", clock.Mono()-t, err)
	return err
}

func (s instrumentedStore) Peek(ctx context.Context, now time.Time, n int64, checks []limiter.Check, out []limiter.Decision) error {
	t := opStart(now)
	err := s.Store.Peek(ctx, now, n, checks, out)
	s.m.StoreOp("peek", clock.Mono()-t, err)
	return err
}

func (s instrumentedStore) Undo(ctx context.Context, now, at time.Time, n int64, checks []limiter.Check) error {
	t := opStart(now)
	err := s.Store.Undo(ctx, now, at, n, checks)
	s.m.StoreOp("undo", clock.Mono()-t, err)
	return err
}

func (s instrumentedStore) Reserve(ctx context.Context, now time.Time, key string, lim limiter.Limit, n int64, maxWait time.Duration) (limiter.Reservation, error) {
	t := opStart(now)
	r, err := s.Store.Reserve(ctx, now, key, lim, n, maxWait)
	if errors.Is(err, limiter.ErrTooLong) {
		s.m.StoreOp("reserve", clock.Mono()-t, nil) // an answer, not a failure
	} else {
		s.m.StoreOp("reserve", clock.Mono()-t, err)
	}
	return r, err
}

func (s instrumentedStore) Cancel(ctx context.Context, now time.Time, r limiter.Reservation) error {
	t := opStart(now)
	err := s.Store.Cancel(ctx, now, r)
	s.m.StoreOp("cancel", clock.Mono()-t, err)
	return err
}

func (s instrumentedStore) Acquire(ctx context.Context, now time.Time, key string, capacity int64, ttl time.Duration) (limiter.Lease, int64, bool, error) {
	t := opStart(now)
	l, held, ok, err := s.Store.Acquire(ctx, now, key, capacity, ttl)
	s.m.StoreOp("acquire", clock.Mono()-t, err)
	return l, held, ok, err
}

func (s instrumentedStore) Release(ctx context.Context, now time.Time, l limiter.Lease) (int64, error) {
	t := opStart(now)
	held, err := s.Store.Release(ctx, now, l)
	s.m.StoreOp("release", clock.Mono()-t, err)
	return held, err
}
