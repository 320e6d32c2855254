package limiter

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Waiters lets callers wait, first come first served, for a concurrency
// slot of a key, without polling: a released slot is handed to the
// longest waiter directly, so a newcomer can never take it first.
//
// Waiters live in this process. With a store shared by several hosts a
// slot freed by another host is only noticed at the next local release or
// at the retry interval.
type Waiters struct {
	lim *Limiter
	// Retry is how often a waiter rechecks the store on its own (for
	// slots freed elsewhere); 0 means never.
	Retry time.Duration

	mu     sync.Mutex
	queues map[string]*waitQueue
}

type waitQueue struct {
	waiters []*waiter
}

type waiter struct {
	ch    chan Lease // receives a handed-over lease
	taken bool       // set under Waiters.mu when a lease was handed over
}

// NewWaiters returns a wait registry over l. It survives config reloads:
// make one per limiter.
func NewWaiters(l *Limiter) *Waiters {
	return &Waiters{lim: l, queues: map[string]*waitQueue{}}
}

// ErrWaitExpired is returned by Waiters.Acquire when its expiry fires.
var ErrWaitExpired = errors.New("limiter: gave up waiting for a slot")

// Acquire takes a slot of key (at most capacity held; capacity <= 0: no
// cap), waiting in FIFO order until one is free, ctx ends or expire
// delivers (nil: no expiry; use a timer of the limiter's clock). It
// returns the number held after acquiring.
func (w *Waiters) Acquire(ctx context.Context, key string, capacity int64, stat string, expire <-chan time.Time) (Lease, int64, error) {
	w.mu.Lock()
	q := w.queues[key]
	if q == nil || len(q.waiters) == 0 {
		l, held, ok, err := w.lim.Acquire(ctx, key, capacity, 0, stat)
		if err != nil || ok {
			w.mu.Unlock()
			return l, held, err
		}
	}
	if q == nil {
		q = &waitQueue{}
		w.queues[key] = q
	}
	me := &waiter{ch: make(chan Lease, 1)}
	q.waiters = append(q.waiters, me)
	w.mu.Unlock()

	var retry <-chan time.Time
	if w.Retry > 0 {
		t := time.NewTicker(w.Retry)
		defer t.Stop()
		retry = t.C
	}
	for {
		select {
		case l := <-me.ch:
			held, _ := w.lim.Held(ctx, key)
			return l, held, nil
		case <-retry:
			w.mu.Lock()
			if !me.taken && q.waiters[0] == me {
				l, held, ok, err := w.lim.Acquire(ctx, key, capacity, 0, stat)
				if err == nil && ok {
					w.remove(key, q, me)
					w.mu.Unlock()
					return l, held, nil
				}
			}
			w.mu.Unlock()
		case <-ctx.Done():
			return Lease{}, 0, w.giveUp(ctx, key, q, me, capacity, ctx.Err())
		case <-expire:
			return Lease{}, 0, w.giveUp(ctx, key, q, me, capacity, ErrWaitExpired)
		}
	}
}

// giveUp leaves the line; a lease handed over meanwhile is passed on.
func (w *Waiters) giveUp(ctx context.Context, key string, q *waitQueue, me *waiter, capacity int64, why error) error {
	w.mu.Lock()
	if me.taken {
		w.mu.Unlock()
		w.Release(context.WithoutCancel(ctx), <-me.ch, capacity)
		return why
	}
	w.remove(key, q, me)
	w.mu.Unlock()
	return why
}

// remove drops a waiter; w.mu is held.
func (w *Waiters) remove(key string, q *waitQueue, me *waiter) {
	for i, x := range q.waiters {
		if x == me {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			break
		}
	}
	if len(q.waiters) == 0 {
		delete(w.queues, key)
	}
}

// Release ends a lease taken with Acquire. If someone waits for the key and
// the key is within capacity, the slot goes to the longest waiter;
// otherwise it is released.
func (w *Waiters) Release(ctx context.Context, l Lease, capacity int64) {
	if l.ID == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if q := w.queues[l.Key]; q != nil && len(q.waiters) > 0 {
		held, err := w.lim.Held(ctx, l.Key)
		if err == nil && (capacity <= 0 || held <= capacity) {
			head := q.waiters[0]
			w.remove(l.Key, q, head)
			head.taken = true
			head.ch <- l
			return
		}
	}
	w.lim.Release(ctx, l)
}

// Waiting returns how many callers wait for key. Only tests call it
// (limiter's and governor's), to wait until a caller is queued.
func (w *Waiters) Waiting(key string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if q := w.queues[key]; q != nil {
		return len(q.waiters)
	}
	return 0
}
