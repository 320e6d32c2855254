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

// Shutdown stops in stages. First the milter, the throttle and the web
// stop accepting: a new SMTP session's milter connection waits in the
// backlog (under systemd's socket unit) for the next daemon. Then the
// milter serves each open session to its end and the throttle lets its
// waiting senders have their grants, until ctx ends. Meanwhile anvil and
// the policy door go on as before, accepting too: a session still in
// this daemon's milter asks them (smtpd's anvil events, the policy at
// RCPT or END-OF-DATA, on a connection smtpd may open only now), and
// what it asked the backlog would be answered only by the next daemon,
// which starts when this one has gone: a wait until ctx ends, then a
// tempfail. Nothing else is waited for: a session that is not in this
// milter may be waiting for the next daemon, so waiting for it would
// wait for ever. Then anvil and the policy door stop accepting and close
// their connections; the SMTP sessions anvil's streams still held are
// handed to the next start (a file in the state directory), and the
// store's state is written and closed. What anvil and the policy door
// counted meanwhile is in that state, so the next daemon's counts are
// exact.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopping.Store(true)
	d.closeListeners("milter", "throttle", "web", "control")
	var sessions []shutdowner
	if d.throttle != nil {
		sessions = append(sessions, d.throttle)
	}
	if d.milter != nil {
		sessions = append(sessions, d.milter)
	}
	if d.web != nil {
		sessions = append(sessions, d.web)
	}
	if d.control != nil {
		sessions = append(sessions, d.control)
	}
	errs := make([]error, len(sessions)+1)
	var wg sync.WaitGroup
	for i, s := range sessions {
		wg.Go(func() { errs[i] = s.Shutdown(ctx) })
	}
	d.waitLogging(&wg)
	d.closeListeners("anvil", "policy")
	if d.anvil != nil {
		now, cancel := context.WithCancel(ctx)
		cancel() // close every stream at once; those holding a session hand it over
		_ = d.anvil.Shutdown(now)
	}
	if d.policy != nil {
		errs[len(sessions)] = d.policy.Shutdown(ctx)
	}
	if d.stopStatus != nil {
		d.stopStatus()
	}
	d.wg.Wait()
	now := time.Now()
	if d.snap != nil {
		// Every door is closed: nothing decides after this.
		d.snap.write(now, true)
	}
	d.writeCarry(now, d.carryOut)
	d.store.Close()
	d.log.Info("sluice stopped")
	return errors.Join(errs...)
}

// waitLogging waits for wg, logging every few seconds what the doors
// still serve: a stop that takes long says what it waits for.
func (d *Daemon) waitLogging(wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			var args []any
			if d.milter != nil {
				args = append(args, "milter_sessions", d.milter.Sessions())
			}
			if d.anvil != nil {
				args = append(args, "anvil_streams", d.anvil.Conns())
			}
			if d.policy != nil {
				args = append(args, "policy_connections", d.policy.Conns())
			}
			if d.throttle != nil {
				args = append(args, "throttle_waiting", d.throttleWaiting.Load())
			}
			d.log.Info("shutting down: still serving", args...)
		}
	}
}
