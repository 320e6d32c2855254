package limiter_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"sluice/internal/limiter"
	"sluice/internal/store/memory"
)

func newWaiters(t *testing.T) *limiter.Waiters {
	s := memory.New(memory.Options{})
	t.Cleanup(func() { s.Close() })
	return limiter.NewWaiters(limiter.New(limiter.Options{Store: s}))
}

// waitQueued waits until n callers are queued on key.
func waitQueued(t *testing.T, w *limiter.Waiters, key string, n int) {
	t.Helper()
	for i := 0; w.Waiting(key) != n; i++ {
		if i > 5000 {
			t.Fatalf("%d waiting, want %d", w.Waiting(key), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWaitersFIFOHandover(t *testing.T) {
	w := newWaiters(t)
	ctx := context.Background()
	first, _, err := w.Acquire(ctx, "k", 1, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int
	leases := make(chan limiter.Lease, 5)
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, held, err := w.Acquire(ctx, "k", 1, "", nil)
			if err != nil || held != 1 {
				t.Errorf("waiter %d: held %d err %v", i, held, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			leases <- l
		}()
		waitQueued(t, w, "k", i+1) // arrival order is i
	}
	w.Release(ctx, first, 1)
	for range 5 {
		w.Release(ctx, <-leases, 1)
	}
	wg.Wait()
	for i, v := range order {
		if v != i {
			t.Fatalf("served in order %v, want 0..4", order)
		}
	}
}

func TestWaitersNoQueueJumping(t *testing.T) {
	w := newWaiters(t)
	ctx := context.Background()
	held, _, _ := w.Acquire(ctx, "k", 1, "", nil)
	got := make(chan limiter.Lease, 1)
	go func() {
		l, _, _ := w.Acquire(ctx, "k", 1, "", nil)
		got <- l
	}()
	waitQueued(t, w, "k", 1)
	w.Release(ctx, held, 1)
	// The slot went to the waiter, not to whoever asks next.
	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, _, err := w.Acquire(tctx, "k", 1, "", nil); err == nil {
		t.Fatal("a newcomer took the slot handed to a waiter")
	}
	w.Release(ctx, <-got, 1)
}

func TestWaitersCancel(t *testing.T) {
	w := newWaiters(t)
	ctx := context.Background()
	held, _, _ := w.Acquire(ctx, "k", 1, "", nil)
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, _, err := w.Acquire(cctx, "k", 1, "", nil)
		errc <- err
	}()
	waitQueued(t, w, "k", 1)
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("cancelled waiter got a lease")
	}
	if w.Waiting("k") != 0 {
		t.Fatal("cancelled waiter still queued")
	}
	w.Release(ctx, held, 1)
	if _, _, err := w.Acquire(ctx, "k", 1, "", nil); err != nil {
		t.Fatal(err)
	}
}
