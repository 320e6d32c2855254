package pool_test

import (
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sluice/internal/pool"
)

// TestReapOldestFirst: workers that have all exited when the pool reaps
// leave their slots oldest process first, as the reference's wait3 loop
// takes them (the kernel lists a parent's children in the order they were
// forked), not in slot order. Slot 0's worker is made the younger (it is
// recycled after one request); then, while the owner is held, both
// workers are killed and the test waits until both have exited (waitid
// with WNOWAIT: they stay to be reaped), then lets the owner go: slot 1 is
// reaped first.
func TestReapOldestFirst(t *testing.T) {
	var mu sync.Mutex
	var reaped []int
	more := make(chan struct{}, 1)
	cfg := baseConfig()
	cfg.MinWorkers, cfg.MaxWorkers, cfg.MaxRequests = 2, 2, 1
	cfg.Events = func(ev pool.Event) {
		if ev.Kind != pool.EvReaped {
			return
		}
		mu.Lock()
		reaped = append(reaped, ev.Worker)
		mu.Unlock()
		select {
		case more <- struct{}{}:
		default:
		}
	}
	waitReaped := func(n int) []int {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			mu.Lock()
			got := slices.Clone(reaped)
			mu.Unlock()
			if len(got) >= n {
				return got
			}
			select {
			case <-more:
			case <-deadline:
				t.Fatalf("reaped %v, want %d reaps", got, n)
			}
		}
	}
	p := start(t, cfg)
	waitStates(t, p, "II")
	wantReply(t, do(t, p, "x"), "echo \"x\"\n") // slot 0's worker, the oldest
	if got := waitReaped(1); got[0] != 0 {
		t.Fatalf("recycled worker reaped from slot %d, want 0", got[0])
	}
	waitStates(t, p, "II")
	snap, _ := p.Snapshot()
	s0, s1 := snap.Slots[0], snap.Slots[1]
	if !s1.Activated.Before(s0.Activated) {
		t.Fatalf("slot 1 started at %v, not before slot 0 (%v)", s1.Activated, s0.Activated)
	}

	held, release := make(chan struct{}), make(chan struct{})
	if !p.OnOwner(func(*pool.Owner) { close(held); <-release }, nil) {
		t.Fatal("OnOwner: pool stopped")
	}
	<-held
	for _, pid := range []int{s0.PID, s1.PID} {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	for _, pid := range []int{s0.PID, s1.PID} {
		var info unix.Siginfo
		if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
			t.Fatalf("waitid %d: %v", pid, err)
		}
	}
	close(release)
	if got := waitReaped(3)[1:]; !slices.Equal(got, []int{1, 0}) {
		t.Fatalf("workers that exited together reaped from slots %v, want [1 0] (oldest first)", got)
	}
}
