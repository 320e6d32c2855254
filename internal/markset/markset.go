// Package markset holds the marks of one name (limiter.Marks) as a
// snapshot that decisions read without a store call: the overlay of an
// administrator's exemptions (governor) and of the throttle's suspended
// keys (ban). A change made here applies at once; one another daemon
// sharing the marks made applies at the next Refresh.
package markset

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/clock"
	"sluice/internal/limiter"
)

// Set is the snapshot of the marks named name, each decoded into a V and
// held by its key. It is replaced whole when it changes.
type Set[V comparable] struct {
	marks  limiter.Marks
	name   string
	decode func(limiter.KeyMark) (V, bool)
	clock  clock.Clock

	snap atomic.Pointer[Snapshot[V]]
	// mu orders the changes made here and the swaps of a refresh; gen
	// counts the changes made here: a Refresh whose read began before one
	// drops what it read (the next reads again), so a change made here is
	// never undone by an older read.
	mu   sync.Mutex
	gen  uint64
	read time.Time // the last Refresh that read the marks
}

// Snapshot is one state of a Set: read it, never change it.
type Snapshot[V comparable] struct {
	m       map[string]V
	changed context.Context
	cancel  context.CancelFunc
}

func newSnapshot[V comparable](m map[string]V) *Snapshot[V] {
	s := &Snapshot[V]{m: m}
	s.changed, s.cancel = context.WithCancel(context.Background())
	return s
}

// Get returns key's value in the snapshot.
func (s *Snapshot[V]) Get(key string) (V, bool) {
	v, ok := s.m[key]
	return v, ok
}

// Len is how many keys the snapshot holds.
func (s *Snapshot[V]) Len() int { return len(s.m) }

// All calls f for each key and value, in no order.
func (s *Snapshot[V]) All(f func(key string, v V)) {
	for k, v := range s.m {
		f(k, v)
	}
}

// Changed is done once a newer snapshot replaces this one.
func (s *Snapshot[V]) Changed() context.Context { return s.changed }

// New returns the set of the marks named name in marks (nil: only what is
// Put here), decoded by decode (false: the mark is skipped), empty until
// the first Refresh. A mark expired by clk's time is skipped.
func New[V comparable](marks limiter.Marks, name string, decode func(limiter.KeyMark) (V, bool), clk clock.Clock) *Set[V] {
	s := &Set[V]{marks: marks, name: name, decode: decode, clock: clk}
	s.snap.Store(newSnapshot(map[string]V{}))
	return s
}

// Shared says whether other daemons change the same marks (then Run
// keeps the snapshot current).
func (s *Set[V]) Shared() bool { return s.marks != nil && s.marks.Shared() }

// Load returns the snapshot in force.
func (s *Set[V]) Load() *Snapshot[V] { return s.snap.Load() }

// Put records key's value, as the owner just wrote its mark.
func (s *Set[V]) Put(key string, v V) { s.change(func(m map[string]V) { m[key] = v }) }

// Delete forgets key, as the owner just deleted its mark.
func (s *Set[V]) Delete(key string) { s.change(func(m map[string]V) { delete(m, key) }) }

func (s *Set[V]) change(f func(map[string]V)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.snap.Load()
	m := maps.Clone(old.m)
	f(m)
	s.gen++
	s.snap.Store(newSnapshot(m))
	old.cancel()
}

// Refresh reads the marks into the snapshot (an error is the marks'
// own). A read that a Put or Delete
// here overtook is dropped: the next Refresh reads again.
func (s *Set[V]) Refresh(ctx context.Context) error {
	if s.marks == nil {
		return nil
	}
	s.mu.Lock()
	gen := s.gen
	s.mu.Unlock()
	list, err := s.marks.List(ctx)
	if err != nil {
		return err // the owner names what failed
	}
	now := s.clock.Now()
	m := map[string]V{}
	for _, k := range list {
		if k.Name != s.name || !k.Expires.IsZero() && !now.Before(k.Expires) {
			continue
		}
		if v, ok := s.decode(k); ok {
			m[k.Key] = v
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen {
		return nil
	}
	s.read = now
	old := s.snap.Load()
	if maps.Equal(m, old.m) {
		return nil
	}
	s.snap.Store(newSnapshot(m))
	old.cancel()
	return nil
}

// Read is when a Refresh last read the marks (zero: never).
func (s *Set[V]) Read() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.read
}

// Run refreshes the snapshot every interval until ctx ends: how a daemon
// learns of the changes another daemon made in shared marks. A failed
// read is passed to onErr.
func (s *Set[V]) Run(ctx context.Context, every time.Duration, onErr func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.Refresh(ctx); err != nil && ctx.Err() == nil {
				onErr(err)
			}
		}
	}
}

// OnChange calls f with the snapshot in force, then again each time a
// newer one replaces it, until f returns true or stop is called; no
// goroutine waits meanwhile.
func (s *Set[V]) OnChange(f func(*Snapshot[V]) bool) (stop func()) {
	var mu sync.Mutex
	stopped := false
	var cur func() bool
	var watch func()
	watch = func() {
		snap := s.snap.Load()
		if f(snap) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			cur = context.AfterFunc(snap.changed, watch)
		}
	}
	watch()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		if cur != nil {
			cur()
		}
	}
}
