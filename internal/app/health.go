package app

import (
	"context"
	"time"
)

// Alive reports whether the daemon's core still answers: one store call
// must come back within timeout. Any answer counts, an error included
// (a Redis outage is the fail mode's business, not a reason to restart);
// only a call that never returns, a deadlock, makes it false. It feeds
// systemd's watchdog.
func (d *Daemon) Alive(timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = d.lim.Held(ctx, "health\x00alive")
	}()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}
