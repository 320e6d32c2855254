package muxd

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// The daemon's signals (docs/protocols/mimedefang-multiplexor.md,
// "Signals"), and sluice's SIGUSR2 (an upgrade in place, upgrade.go);
// SIGPIPE is ignored.
var handled = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR2}

// notifySignals starts catching the daemon's signals; it is called before
// the daemon reports it is serving, so none is lost after.
func notifySignals() chan os.Signal {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, handled...)
	signal.Ignore(syscall.SIGPIPE)
	return sigs
}

func stopSignals(sigs chan os.Signal) { signal.Stop(sigs) }

// wait runs each signal's action until one says stop, ctx ends or the
// pool stops by itself.
func (r *running) wait(ctx context.Context, sigs <-chan os.Signal) {
	actions := map[os.Signal]func() (stop bool){
		syscall.SIGINT:  r.reread,
		syscall.SIGHUP:  r.reopenStats,
		syscall.SIGTERM: terminate,
		syscall.SIGUSR2: r.upgrade,
	}
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-r.runDone:
			// The pool stopped by itself: its owner could not run.
			r.runEnded, r.runErr = true, err
			r.log.Error(fmt.Sprintf("The worker pool stopped: %v", err))
			return
		case s := <-sigs:
			if actions[s]() {
				return
			}
		}
	}
}

// reread is SIGINT: a new worker generation reads the filter rules again.
func (r *running) reread() bool {
	r.pool.Reread()
	return false
}

// reopenStats is SIGHUP: the stats file is reopened (after rotation).
func (r *running) reopenStats() bool {
	if r.stats != nil {
		r.stats.Reopen()
	}
	return false
}

// terminate is SIGTERM: stop.
func terminate() bool { return true }
