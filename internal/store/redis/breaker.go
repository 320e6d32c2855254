package redis

import (
	"sync"
	"sync/atomic"
	"time"
)

// ErrCircuitOpen is the error of a call the circuit breaker did not send
// to Redis: Redis missed Options.BreakAfter deadlines in a row, and the
// probe that would show it answers again is not due yet (or is in
// flight). The limiter applies its fail mode to it as to any store error.
// It reports FastFail, so the metrics count it apart
// (sluice_store_fast_failures_total).
var ErrCircuitOpen error = circuitOpen{}

type circuitOpen struct{}

func (circuitOpen) Error() string {
	return "circuit open: Redis missed its deadlines; deciding by the fail mode until a probe succeeds"
}

// FastFail says the call was failed at once, without trying Redis.
func (circuitOpen) FastFail() bool { return true }

// breaker is the store's circuit breaker (see the package comment). While
// closed, calls go to Redis and consecutive misses (a deadline passed, or
// no connection) are counted; at after misses, the last one seen at
// least span after the first, it opens: calls fail at once with
// ErrCircuitOpen, except one probe every probe interval, which goes to
// Redis. Any answer from Redis (the probe's, a call that was already in
// flight, a background PING) closes it. The span (the deadline) keeps
// one stall that times out every call in flight at once (this host's
// CPU starved, a GC pause) from opening it: a call sent after the first
// miss must miss too. The closed path is two atomic loads.
type breaker struct {
	after int64         // misses in a row that open it; 0: never opens
	span  time.Duration // the least time from the first of them to the last
	probe time.Duration // while open, the time between probes

	open      atomic.Bool
	misses    atomic.Int64 // consecutive misses
	firstMiss atomic.Int64 // when the first of them was seen, Unix ns

	mu      sync.Mutex
	retryAt time.Time // open: when the next probe may go
	probing bool      // open: a probe is in flight

	trips     atomic.Uint64 // times it opened
	fastFails atomic.Uint64 // calls failed at once while open
}

// enter says whether a call may go to Redis now, and whether it goes as
// the probe (whose outcome the caller must report with answered, missed
// or abandoned).
func (b *breaker) enter(now time.Time) (ok, probe bool) {
	if !b.open.Load() {
		return true, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !b.open.Load():
		return true, false
	case b.probing || now.Before(b.retryAt):
		b.fastFails.Add(1)
		return false, false
	}
	b.probing = true
	return true, true
}

// answered notes that Redis answered a call (a reply, even an error
// reply): it closes the breaker, and says so once.
func (b *breaker) answered(probe bool) (closed bool) {
	if b.misses.Load() != 0 {
		b.misses.Store(0)
	}
	if !probe && !b.open.Load() {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.probing = false
	}
	if !b.open.Load() {
		return false
	}
	b.misses.Store(0)
	b.open.Store(false)
	return true
}

// missed notes a call Redis did not answer in time (or could not be
// reached for) at now; it opens the breaker at the after-th miss in a
// row if span has passed since the first, and says so once. A failed
// probe keeps it open for another interval.
func (b *breaker) missed(probe bool, now time.Time) (opened bool) {
	if probe {
		b.mu.Lock()
		b.probing = false
		b.retryAt = now.Add(b.probe)
		b.mu.Unlock()
		return false
	}
	n := b.misses.Add(1)
	if n == 1 {
		b.firstMiss.Store(now.UnixNano())
	}
	if b.after <= 0 || n < b.after || b.open.Load() || now.UnixNano()-b.firstMiss.Load() < int64(b.span) {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open.Load() {
		return false
	}
	b.retryAt = now.Add(b.probe)
	b.open.Store(true)
	b.trips.Add(1)
	return true
}

// abandoned notes a probe whose caller gave up before Redis could
// answer: it tells nothing, so the next call probes.
func (b *breaker) abandoned(probe bool) {
	if probe {
		b.mu.Lock()
		b.probing = false
		b.mu.Unlock()
	}
}

// BreakerState is what the circuit breaker has done so far.
type BreakerState struct {
	// Open says calls fail at once (with ErrCircuitOpen) but for the
	// probes.
	Open bool
	// Trips counts the times it opened.
	Trips uint64
	// FastFails counts the calls it failed at once: decisions made by
	// the fail mode without waiting for Redis.
	FastFails uint64
}

// Breaker returns the circuit breaker's state and counts.
func (s *Store) Breaker() BreakerState {
	return BreakerState{Open: s.brk.open.Load(), Trips: s.brk.trips.Load(), FastFails: s.brk.fastFails.Load()}
}
