package dropq

import (
	"slices"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// TestOrderAndClose: every value put reaches drain in order, and Close
// returns after drain has taken them all.
func TestOrderAndClose(t *testing.T) {
	var got []int
	q := Start(100, func(ch <-chan int) {
		for v := range ch {
			got = append(got, v)
		}
	})
	for i := range 50 {
		if ok, _ := q.Put(i); !ok {
			t.Fatalf("Put(%d) refused", i)
		}
	}
	q.Close()
	if want := seq(50); !slices.Equal(got, want) {
		t.Fatalf("drained %v, want %v", got, want)
	}
	if ok, first := q.Put(99); ok || first {
		t.Fatalf("Put after Close: ok=%v first=%v", ok, first)
	}
	q.Close() // a second Close returns
}

// TestDropWhenFull: with drain stuck, Put drops beyond the bound without
// blocking, counts the drops and flags the first one only.
func TestDropWhenFull(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var got []int
	q := Start(2, func(ch <-chan int) {
		<-release
		for v := range ch {
			mu.Lock()
			got = append(got, v)
			mu.Unlock()
		}
	})
	var firsts int
	for i := range 5 {
		ok, first := q.Put(i)
		if i < 2 && !ok {
			t.Fatalf("Put(%d) refused with room left", i)
		}
		if i >= 2 && ok {
			t.Fatalf("Put(%d) accepted beyond the bound", i)
		}
		if first {
			firsts++
		}
	}
	if firsts != 1 || q.Dropped() != 3 {
		t.Fatalf("first flagged %d times, %d dropped; want 1 and 3", firsts, q.Dropped())
	}
	close(release)
	q.Close()
	if !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("drained %v, want [0 1]", got)
	}
}

// TestConcurrentPutClose: Put racing Close never panics (no send on a
// closed channel) and never blocks.
func TestConcurrentPutClose(t *testing.T) {
	for range 100 {
		q := Start(1, func(ch <-chan int) {
			for range ch {
			}
		})
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range 100 {
					q.Put(g*100 + i)
				}
			})
		}
		q.Close()
		wg.Wait()
	}
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
