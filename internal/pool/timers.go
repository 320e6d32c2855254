package pool

// Timers: a heap of deadlines served by one clock timer in the owner loop.

import (
	"container/heap"
	"time"
)

type timerEntry struct {
	// at is the deadline as a duration since the pool's first deadline
	// (Pool.tbase; monotonic, as Time.Before compares; Pool.when makes
	// it a time again), the heap's key: comparing two integers is most of what
	// keeping the heap costs, a few times per request.
	at    time.Duration
	fn    func()
	c     *call // set instead of fn: the queue timeout of c
	index int   // -1 when not in the heap
}

type timerHeap []*timerEntry

func (h timerHeap) Len() int { return len(h) }

func (h timerHeap) Less(i, j int) bool { return h[i].at < h[j].at }

func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *timerHeap) Push(x any) {
	e := x.(*timerEntry)
	e.index = len(*h)
	*h = append(*h, e)
}

func (h *timerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}

func (p *Pool) after(d time.Duration, fn func()) *timerEntry {
	return p.schedule(&timerEntry{fn: fn, index: -1}, d)
}

// now is the pool's clock.
func (p *Pool) now() time.Time { return p.clk.Now() }

// schedule (re)arms e, an entry kept by its user, to fire in d.
func (p *Pool) schedule(e *timerEntry, d time.Duration) *timerEntry {
	when := p.now().Add(d)
	if p.tbase.IsZero() {
		p.tbase = when
	}
	e.at = when.Sub(p.tbase)
	if e.index >= 0 {
		heap.Fix(&p.timers, e.index)
	} else {
		heap.Push(&p.timers, e)
	}
	return e
}

// when is e's deadline.
func (p *Pool) when(e *timerEntry) time.Time { return p.tbase.Add(e.at) }

func (e *timerEntry) cancel(p *Pool) {
	if e != nil && e.index >= 0 {
		heap.Remove(&p.timers, e.index)
	}
}

func (p *Pool) fireTimers() {
	due := p.now().Sub(p.tbase)
	for len(p.timers) > 0 && p.timers[0].at <= due {
		e := heap.Pop(&p.timers).(*timerEntry)
		if e.c != nil {
			p.queueTimeout(e.c)
		} else {
			e.fn()
		}
	}
}
