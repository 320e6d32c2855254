package pool

import (
	"fmt"
	"time"
)

// scheduleTick arms band's next tick (docs/protocols/mimedefang-multiplexor.md, "Ticks") TickInterval from now.
func (p *Pool) scheduleTick(band int) {
	if p.cfg.TickInterval > 0 {
		p.after(p.cfg.TickInterval, func() { p.doTick(band) })
	}
}

// doTick sends "tick <band>" to a free worker, chosen as for an "other"
// command. A tick is never queued: with no free worker, or when the
// worker cannot be started, it is skipped. The next one is scheduled when
// this one ends, so at most one tick per band runs at a time.
func (p *Pool) doTick(band int) {
	s := p.findFree(Other)
	if s == nil {
		p.emit(Event{Kind: EvTickSkipped, Worker: -1, Band: band})
		p.scheduleTick(band)
		return
	}
	c := &call{req: Request{Line: fmt.Sprintf("tick %d", band)}, kind: Other, tick: band}
	c.done = func(Result) { p.scheduleTick(band) }
	p.dispatch(s, c)
}

// AutoscaleInterval and the other autoscaling constants are 3.7.1's
// (docs/protocols/mimedefang-multiplexor.md, "Autoscaling"); none can be
// configured. The `autoscale` command reports them.
const (
	AutoscaleInterval = 15 * time.Second
	AutoscaleAlpha    = 0.25
	AutoscaleOut      = 0.80
	AutoscaleIn       = 0.30
	AutoscaleOutCool  = 5 * time.Second
	AutoscaleInCool   = 30 * time.Second
)

// autoscaleTick is -k, as 3.7.1 makes its decisions: update the moving
// average of the busy share of running (idle, busy, killed) workers,
// then start one stopped slot when it is above AutoscaleOut, or else stop
// the idle worker that became idle last when it is below AutoscaleIn.
// The cool-downs are counted in whole seconds of the clock, as the
// reference counts them: a scale-out more than 5 s after the last
// activation (every activation is a scale-out, also one a request makes
// when it finds no idle worker), a scale-in more than 30 s after the last
// activation and the last scale-in.
func (p *Pool) autoscaleTick() {
	p.after(AutoscaleInterval, p.autoscaleTick)
	now := p.clk.Now()
	running, busy := p.running(), p.busy()
	ratio := 0.0
	if running > 0 {
		ratio = float64(busy) / float64(running)
	}
	p.ema = p.ema*(1-AutoscaleAlpha) + ratio*AutoscaleAlpha
	sinceOut, sinceIn := wholeSecondsSince(now, p.lastActivation), wholeSecondsSince(now, p.lastScaleIn)
	switch {
	case p.ema > AutoscaleOut && running < len(p.slots) && sinceOut > int64(AutoscaleOutCool/time.Second):
		if len(p.stopped) > 0 {
			_ = p.activate(p.slots[p.stopped[0]], fmt.Sprintf("Autoscale: scale-out (ema_busy=%.2f)", p.ema))
		}
	case p.ema < AutoscaleIn && running > p.cfg.MinWorkers &&
		sinceIn > int64(AutoscaleInCool/time.Second) && sinceOut > int64(AutoscaleInCool/time.Second):
		// The head of the reference's idle list: the worker that
		// became idle last.
		if idle := p.idleList(); len(idle) > 0 {
			p.lastScaleIn = now
			p.kill(idle[0], fmt.Sprintf("Autoscale: scale-in (ema_busy=%.2f)", p.ema))
			p.emit(Event{Kind: EvAutoscale, Worker: idle[0].n, Scale: ScaledIn, Running: p.running(), EMA: p.ema})
		}
	}
}

// wholeSecondsSince is now-then in whole seconds of the clock (time_t
// arithmetic), or the seconds since the epoch when then is zero: the
// reference's "never" is time 0.
func wholeSecondsSince(now, then time.Time) int64 {
	if then.IsZero() {
		return now.Unix()
	}
	return now.Unix() - then.Unix()
}
