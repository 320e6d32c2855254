package pool

import (
	"errors"
	"fmt"
	"slices"
)

// CheckInvariants checks, on the owner goroutine, the slot invariants
// doc.go states; nil once the pool has stopped.
func (p *Pool) CheckInvariants() error {
	var errs []error
	p.exec(func() { errs = p.invariants() })
	return errors.Join(errs...)
}

func (p *Pool) invariants() []error {
	var errs []error
	bad := func(s *slot, format string, args ...any) {
		errs = append(errs, fmt.Errorf("slot %d (%s): %s", s.n, s.state, fmt.Sprintf(format, args...)))
	}
	for _, s := range p.slots {
		if (s.state == Stopped) != (s.proc == nil) {
			bad(s, "proc %v", s.proc)
		}
		if (s.state == Stopped && s.start == nil) != slices.Contains(p.stopped, s.n) {
			bad(s, "on the stopped list: %v, starting: %v", slices.Contains(p.stopped, s.n), s.start != nil)
		}
		if s.start != nil && s.state != Stopped {
			bad(s, "starting")
		}
		if s.state != Busy && (s.cmd.call != nil || s.timers.busy != nil) {
			bad(s, "call %v busy timer %v", s.cmd.call != nil, s.timers.busy != nil)
		}
		if s.state == Idle && s.cmd.cur != Other {
			bad(s, "current kind %v", s.cmd.cur)
		}
	}
	var in [4]int
	for _, s := range p.slots {
		in[s.state]++
	}
	if in != p.inState {
		errs = append(errs, fmt.Errorf("slots per state %v, counted %v", in, p.inState))
	}
	if len(p.stopped) != p.count(Stopped)-p.starting {
		errs = append(errs, fmt.Errorf("stopped list %v, %d slots Stopped, %d starting", p.stopped, p.count(Stopped), p.starting))
	}
	for _, c := range p.queue {
		if c.timer == nil || c.timer.index < 0 {
			errs = append(errs, fmt.Errorf("queued call %q has no queue timeout", c.req.Line))
		}
	}
	return errs
}
