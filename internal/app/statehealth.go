package app

import (
	"slices"
	"strings"
	"sync"
)

// stateHealth is whether the daemon holds the state its last run left in
// the state directory. A start that could not restore it (a state file
// unreadable, another user's, refused) is degraded, with the reasons, in
// `sluice status`, the status page, /status.json and a metric
// (sluice_state_degraded): the snapshot's reason until the next
// successful periodic snapshot (its counts are then whole again, as far
// as this run's traffic goes), the marks' for the whole run (they are
// kept in memory only).
type stateHealth struct {
	mu      sync.Mutex
	reasons map[string]string // by file: why its state was not restored
}

// lost notes that file's state was not restored, and why.
func (h *stateHealth) lost(file, why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reasons == nil {
		h.reasons = map[string]string{}
	}
	h.reasons[file] = why
}

// kept clears files' reasons: their state is on disk again.
func (h *stateHealth) kept(files ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range files {
		delete(h.reasons, f)
	}
}

// degraded is "" when the state is whole, else the reasons, one per
// file, "; "-joined.
func (h *stateHealth) degraded() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.reasons))
	for f, why := range h.reasons {
		out = append(out, f+": "+why)
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}
