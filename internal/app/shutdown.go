package app

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// serveDoor serves one listener until Shutdown. A Serve that returns
// before Shutdown began means the door no longer accepts (the accept
// loops retry temporary errors themselves): it is logged and reported on
// Failed, and the daemon's owner stops it (sluice serve exits 1, so that
// systemd's Restart= starts it again) rather than run with a door shut.
func (d *Daemon) serveDoor(bl boundListener) {
	err := bl.serve(bl.l)
	if d.stopping.Load() {
		return
	}
	if err == nil {
		err = errors.New("stopped accepting")
	}
	d.log.Error(bl.door+": listener failed", "listen", bl.spec, "err", err)
	d.failed <- fmt.Errorf("%s listener %s: %w", bl.door, bl.spec, err)
}

// Failed reports a door whose listener failed; the daemon keeps its
// other doors open until Shutdown. Call it after Start.
func (d *Daemon) Failed() <-chan error { return d.failed }

// shutdowner is a door's server.
type shutdowner interface {
	Shutdown(ctx context.Context) error
}

// doors returns the doors' servers that were built.
func (d *Daemon) doors() []shutdowner {
	var out []shutdowner
	if d.anvil != nil {
		out = append(out, d.anvil)
	}
	if d.policy != nil {
		out = append(out, d.policy)
	}
	if d.throttle != nil {
		out = append(out, d.throttle)
	}
	if d.milter != nil {
		out = append(out, d.milter)
	}
	if d.web != nil {
		out = append(out, d.web)
	}
	return out
}

// Shutdown stops in two stages. First every door stops accepting (all
// listeners are closed before any door drains, so no door takes new
// clients while another waits for its own); then every door lets its
// clients finish their requests, all at once, and when ctx ends closes
// what is left. The store is closed last.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopping.Store(true)
	d.closeListeners()
	doors := d.doors()
	errs := make([]error, len(doors))
	var wg sync.WaitGroup
	for i, s := range doors {
		wg.Go(func() { errs[i] = s.Shutdown(ctx) })
	}
	wg.Wait()
	if d.stopStatus != nil {
		d.stopStatus()
	}
	d.wg.Wait()
	if d.snap != nil {
		// Every door is closed: nothing decides after this.
		d.snap.write(time.Now(), true)
	}
	d.store.Close()
	d.log.Info("sluice stopped")
	return errors.Join(errs...)
}
