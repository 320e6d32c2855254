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

// autoscaleInterval and the other autoscaling constants are upstream
// HEAD's (docs/protocols/mimedefang-multiplexor.md, "Autoscaling"); none can be configured.
const (
	autoscaleInterval = 15 * time.Second
	autoscaleAlpha    = 0.25
	autoscaleOut      = 0.80
	autoscaleIn       = 0.30
	autoscaleOutCool  = 5 * time.Second
	autoscaleInCool   = 30 * time.Second
)

// autoscaleTick is -k: update the moving average of the busy share of
// running workers, then start one stopped slot when it is high, or stop
// one idle worker when it is low, subject to the cool-downs (every
// activation counts as a scale-out).
func (p *Pool) autoscaleTick() {
	p.after(autoscaleInterval, p.autoscaleTick)
	now := p.clk.Now()
	running, busy := p.running(), p.busy()
	ratio := 0.0
	if running > 0 {
		ratio = float64(busy) / float64(running)
	}
	p.ema = p.ema*(1-autoscaleAlpha) + ratio*autoscaleAlpha
	sinceOut := now.Sub(p.lastActivation)
	switch {
	case p.ema > autoscaleOut && running < len(p.slots) && (p.lastActivation.IsZero() || sinceOut > autoscaleOutCool):
		if len(p.stopped) > 0 {
			_ = p.activate(p.slots[p.stopped[0]], fmt.Sprintf("Autoscale: scale-out (ema_busy=%.2f)", p.ema))
		}
	case p.ema < autoscaleIn && running > p.cfg.MinWorkers &&
		(p.lastScaleIn.IsZero() || now.Sub(p.lastScaleIn) > autoscaleInCool) &&
		(p.lastActivation.IsZero() || sinceOut > autoscaleInCool):
		// The worker idle the longest goes.
		idle := p.idleList()
		if len(idle) > 0 {
			p.lastScaleIn = now
			p.kill(idle[len(idle)-1], fmt.Sprintf("Autoscale: scale-in (ema_busy=%.2f)", p.ema))
		}
	}
}
