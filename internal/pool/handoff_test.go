package pool

import (
	"sync"
	"testing"
)

// TestHandoffTransitions walks every state through every operation.
func TestHandoffTransitions(t *testing.T) {
	type op struct {
		name string
		f    func(*handoff) bool
	}
	ops := []op{
		{"claimOwner", (*handoff).claimOwner},
		{"claimHolder", (*handoff).claimHolder},
		{"abandon", (*handoff).abandon},
	}
	// want[from][op] is the state after op, and whether op succeeded.
	type to struct {
		state int32
		ok    bool
	}
	want := map[int32][3]to{
		hoRunning:   {{hoOwner, true}, {hoHolder, true}, {hoAbandoned, true}},
		hoAbandoned: {{hoOwner, true}, {hoHolder, true}, {hoAbandoned, false}},
		hoOwner:     {{hoOwner, false}, {hoOwner, false}, {hoOwner, false}},
		hoHolder:    {{hoHolder, false}, {hoHolder, false}, {hoHolder, false}},
	}
	for from, row := range want {
		for i, o := range ops {
			var h handoff
			h.state.Store(from)
			ok := o.f(&h)
			if got := h.state.Load(); got != row[i].state || ok != row[i].ok {
				t.Errorf("%s from %d: state %d ok %v, want %d %v", o.name, from, got, ok, row[i].state, row[i].ok)
			}
			if ab := h.abandoned(); ab != (h.state.Load() == hoAbandoned) {
				t.Errorf("abandoned() = %v in state %d", ab, h.state.Load())
			}
		}
	}
}

// TestHandoffOneWinner: when the owner and the holder (and a leaving
// client) race, exactly one of the two claims succeeds.
func TestHandoffOneWinner(t *testing.T) {
	for range 20000 {
		var h handoff
		var owner, holder bool
		var wg sync.WaitGroup
		wg.Add(3)
		ready := make(chan struct{}) // all three start together
		go func() { defer wg.Done(); <-ready; owner = h.claimOwner() }()
		go func() { defer wg.Done(); <-ready; holder = h.claimHolder() }()
		go func() { defer wg.Done(); <-ready; h.abandon() }()
		close(ready)
		wg.Wait()
		if owner == holder {
			t.Fatalf("owner claimed %v, holder claimed %v: want exactly one", owner, holder)
		}
		if s := h.state.Load(); owner && s != hoOwner || holder && s != hoHolder {
			t.Fatalf("final state %d after owner=%v holder=%v", s, owner, holder)
		}
	}
}
