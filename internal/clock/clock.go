// Package clock is the single source of time for decision code: a Clock
// interface with the real wall clock and a fake that tests advance by hand.
package clock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock tells the time and makes timers. Decision code never calls
// time.Now directly; it is handed a Clock so tests can move time forward
// without sleeping.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once after d.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer that sluice uses.
type Timer interface {
	// C delivers the time when the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it was active.
	Stop() bool
}

// Real is the wall clock.
type Real struct{}

// Now returns Now().
func (Real) Now() time.Time { return Now() }

// Now is time.Now at one clock read instead of two: the monotonic
// clock's reading (exact, as time.Now's) added to a wall clock reading
// at most a second old. A step of the wall clock (settimeofday, a leap
// second) shows within a second, not at once.
func Now() time.Time {
	d := Mono()
	a := anchor.Load()
	if a == nil || d < a.mono || d-a.mono >= time.Second {
		t := time.Now()
		anchor.Store(&wallAnchor{t: t, mono: MonoOf(t)})
		return t
	}
	return a.t.Add(d - a.mono)
}

// wallAnchor is a time.Now reading and its Mono, for Now.
type wallAnchor struct {
	t    time.Time
	mono time.Duration
}

var anchor atomic.Pointer[wallAnchor]

// NewTimer wraps time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

// Fake is a manually advanced clock for tests. The zero value is not
// usable; call NewFake.
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

// NewFake returns a fake clock set to start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the fake's current time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the fake clock forward by d and fires every timer whose
// deadline has been reached.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	now := f.now
	var due []*fakeTimer
	kept := f.timers[:0]
	for _, t := range f.timers {
		if !t.when.After(now) {
			due = append(due, t)
		} else {
			kept = append(kept, t)
		}
	}
	f.timers = kept
	f.mu.Unlock()
	for _, t := range due {
		t.ch <- now
	}
}

// Set moves the fake clock to t (which must not be before the current time).
func (f *Fake) Set(t time.Time) { f.Advance(t.Sub(f.Now())) }

// NewTimer returns a timer that fires when the fake clock reaches now+d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, when: f.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- f.now
		return t
	}
	f.timers = append(f.timers, t)
	return t
}

// Timers reports how many timers are waiting to fire (for tests that wait
// until a goroutine has armed its timer before advancing the clock).
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

type fakeTimer struct {
	f    *Fake
	when time.Time
	ch   chan time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	for i, x := range t.f.timers {
		if x == t {
			t.f.timers = append(t.f.timers[:i], t.f.timers[i+1:]...)
			return true
		}
	}
	return false
}

// origin is the monotonic clock's origin for Mono.
var origin = time.Now()

// Mono reads the monotonic clock alone: the time since this process's
// start. It is one clock read where time.Now is two (the wall clock too),
// for timing an operation or arming a deadline on a per-request path.
func Mono() time.Duration { return time.Since(origin) }

// MonoTime is the time.Time of the Mono reading d, with its monotonic
// reading: a deadline set with it does not move when the wall clock is
// stepped.
func MonoTime(d time.Duration) time.Time { return origin.Add(d) }

// MonoOf is t as a Mono reading (monotonic when t has a monotonic
// reading, as time.Now's and MonoTime's do).
func MonoOf(t time.Time) time.Duration { return t.Sub(origin) }
