// Package dropq is a bounded queue drained by one goroutine, for writers
// that must never block their callers (the syslog client, the mux's stats
// file): Put never waits, and what does not fit is dropped and counted.
package dropq

import "sync"

// Queue hands values to its drain goroutine. Create it with Start.
type Queue[T any] struct {
	ch      chan T
	done    chan struct{}
	mu      sync.Mutex // guards closed and dropped, and ch against Put after Close
	closed  bool
	dropped int
}

// Start makes a queue of size values and runs drain on a goroutine of its
// own: drain gets every value put, in order, until the queue is closed
// and emptied, then returns.
func Start[T any](size int, drain func(<-chan T)) *Queue[T] {
	q := &Queue[T]{ch: make(chan T, size), done: make(chan struct{})}
	go func() {
		defer close(q.done)
		drain(q.ch)
	}()
	return q
}

// Put queues v without waiting. It returns false when v was not queued:
// the queue was closed, or full (v is then dropped and counted). first is
// true for the first value dropped since the queue started, so that the
// caller can say once that it drops.
func (q *Queue[T]) Put(v T) (ok, first bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false, false
	}
	select {
	case q.ch <- v:
		return true, false
	default:
		q.dropped++
		return false, q.dropped == 1
	}
}

// Close stops taking values and waits for drain to return (after the
// values already queued). A second Close returns at once.
func (q *Queue[T]) Close() {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.closed = true
	close(q.ch)
	q.mu.Unlock()
	<-q.done
}
