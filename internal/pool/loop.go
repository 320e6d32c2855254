package pool

import (
	"context"
	"os"
	"os/signal"
	"sluice/internal/clock"
	"syscall"
	"time"
)

// Run starts the minimum workers and serves until ctx ends; then it
// closes every worker's stdin, waits up to KillGrace for them to exit,
// sends SIGTERM, waits again, sends SIGKILL, and reaps every child before
// it returns. Queued and in-flight requests get ErrClosed. Its one error
// is the owner's epoll set failing to be made: the pool then stops at
// once (every request gets ErrClosed).
func (p *Pool) Run(ctx context.Context) error {
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)
	defer signal.Stop(sigchld)
	defer func() {
		close(p.done)
		p.drainInbox()
		p.wg.Wait()
	}()
	r, err := newReactor()
	if err != nil {
		return err
	}
	p.react = r
	r.start()
	defer r.close()
	defer p.endZygotes()
	p.start = p.clk.Now()
	for _, s := range p.slots {
		s.lastChange = p.start
	}
	p.emit(Event{Kind: EvStarted, Worker: -1, Config: &p.cfg})
	p.bringUpCheck()
	p.after(p.cfg.IdleTime, p.idleTimer)
	if p.cfg.StatusLogInterval > 0 {
		p.after(p.cfg.StatusLogInterval, p.statusLog)
	}
	if p.cfg.Autoscale {
		p.after(AutoscaleInterval, p.autoscaleTick)
		p.emit(Event{Kind: EvAutoscale, Worker: -1, Scale: ScaleEnabled})
	}
	for band := range p.cfg.TickBands {
		p.scheduleTick(band)
	}

	var timer clock.Timer
	var armed time.Time
	for {
		if p.react.armed() {
			// Replies that have come in since the last message, before
			// the timers are armed: their handling may start new ones.
			p.react.poll()
		}
		var tc <-chan time.Time
		if len(p.timers) > 0 {
			// A timer armed for a deadline that has since gone (a busy
			// timer cancelled) is left to fire early: fireTimers then
			// finds nothing due and the loop arms the next one. Re-arming
			// for every request would cost a timer each.
			when := p.when(p.timers[0])
			if timer == nil || when.Before(armed) {
				if timer != nil {
					timer.Stop()
				}
				timer = p.clk.NewTimer(when.Sub(p.clk.Now()))
				armed = when
			}
			tc = timer.C()
		} else if timer != nil {
			timer.Stop()
			timer = nil
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			p.shutdown(sigchld)
			return nil
		case m := <-p.in:
			p.handle(m)
			// Take what else has come without a full select (whose cost
			// grows with its cases); a bounded batch, so that timers,
			// signals and ctx are not starved.
		batch:
			for range inBatch {
				select {
				case m := <-p.in:
					p.handle(m)
				default:
					break batch
				}
			}
		case ev := <-p.tags:
			p.handleTag(ev)
		case <-p.react.kick:
			p.react.kicked()
		case <-sigchld:
			p.reap()
		case <-tc:
			timer = nil
			p.fireTimers()
		}
	}
}

// ownerMsg is one message on Pool.in: a call (c) or a function to run
// (f). drop, if set, is run instead of f when the pool stops before the
// message is handled (drainInbox).
type ownerMsg struct {
	c    *call
	f    func()
	drop func()
}

const (
	inBuffer = 256 // capacity of Pool.in
	inBatch  = 32  // messages taken after one select, at most
)

func (p *Pool) handle(m ownerMsg) {
	if m.c != nil {
		p.submit(m.c)
		return
	}
	m.f()
}
