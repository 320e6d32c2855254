package pool

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// submit is docs/protocols/mimedefang-multiplexor.md, "Forwarded commands": cap per domain, choose a worker, queue or refuse.
func (p *Pool) submit(c *call) {
	if c.kind == RecipOK && p.cfg.DomainLimit > 0 {
		if d, ok := RecipokDomain(c.req.Line); ok {
			n := 0
			for _, s := range p.slots {
				if s.state == Busy && s.cmd.cur == RecipOK && strings.EqualFold(s.cmd.domain, d) {
					n++
				}
			}
			if n >= p.cfg.DomainLimit {
				p.emit(Event{Kind: EvDomainLimit, Worker: -1, Limit: p.cfg.DomainLimit, Domain: d})
				c.finish(Result{Err: ErrDomainLimit})
				return
			}
		}
	}
	s := p.findFree(c.kind)
	if s == nil {
		if c.req.Queue && p.cfg.QueueSize > 0 {
			if len(p.queue) < p.cfg.QueueSize {
				p.queue = append(p.queue, c)
				c.qtimer = timerEntry{index: -1, c: c}
				c.timer = p.schedule(&c.qtimer, p.cfg.QueueTimeout)
				p.emit(Event{Kind: EvQueued, Worker: -1, Queued: len(p.queue)})
				return
			}
			p.emit(Event{Kind: EvQueueFull, Worker: -1})
		}
		p.emit(Event{Kind: EvNoFreeWorkers, Worker: -1, Map: c.req.Map})
		c.finish(Result{Err: ErrNoFreeWorkers})
		return
	}
	p.dispatch(s, c)
}

func (p *Pool) queueTimeout(c *call) {
	for i, q := range p.queue {
		if q == c {
			p.queue = append(p.queue[:i], p.queue[i+1:]...)
			c.finish(Result{Err: ErrQueueTimeout})
			return
		}
	}
}

// findFree is docs/protocols/mimedefang-multiplexor.md, "Choosing a worker", the reference's findFreeWorker: among the idle
// workers, taken in the order of its idle list (the most recently idle
// first), one whose last command kind is k or which has run nothing since
// it started, preferring a real match and then the oldest process; else
// the oldest idle worker; else a slot whose worker is being started for
// no request (-E: it waits for the zygote, as the reference's would have
// been started before the request was read); else the first stopped
// slot. With -A the choice is logged.
func (p *Pool) findFree(k Kind) *slot {
	idle := p.idleBuf[:0]
	for _, s := range p.slots {
		if s.state == Idle && !s.life.dead && !s.life.reapPending {
			idle = append(idle, s)
		}
	}
	p.idleBuf = idle[:0]
	slices.SortFunc(idle, func(a, b *slot) int { return cmp.Compare(b.idleSeq, a.idleSeq) })
	matches := func(s *slot) bool { return k != Other && s.cmd.last == k }
	var best, same *slot
	for _, s := range idle {
		if best == nil || s.life.activationNo < best.life.activationNo {
			best = s
		}
		if matches(s) || s.cmd.last == Other {
			if same == nil || !matches(same) || s.life.activationNo < same.life.activationNo {
				same = s
			}
		}
	}
	if same != nil {
		best = same
	}
	if best == nil && p.starting > 0 {
		for _, s := range p.slots {
			if s.start != nil && s.start.call == nil {
				best = s
				break
			}
		}
	}
	if best == nil && len(p.stopped) > 0 {
		best = p.slots[p.stopped[0]]
	}
	if best != nil && p.cfg.LogScheduling {
		act := uint64(0)
		if best.life.activationNo > 0 {
			act = best.life.activationNo - 1
		}
		p.emit(Event{Kind: EvScheduling, Worker: best.n, State: best.state, Cmd: k, Activation: act, Last: best.cmd.last})
	}
	return best
}

// activationReason is the log's reason for starting a worker for c.
func activationReason(c *call) string {
	switch {
	case c.tick >= 0:
		return "About to run tick"
	case c.req.Map:
		return "About to handle map request"
	case c.scanPath():
		return "About to perform scan"
	default:
		return "About to execute command '" + truncate(c.req.Line+"\n", 100) + "'"
	}
}

// dispatch starts s if needed and sends c's command to it; a worker
// being started (s.start) gets it once it is up (forked).
func (p *Pool) dispatch(s *slot, c *call) {
	if s.state == Stopped && s.start == nil {
		if err := p.activate(s, activationReason(c)); err != nil {
			p.activateFailed(s, c)
			return
		}
	}
	if s.start != nil {
		s.start.call = c
		return
	}
	now := p.now()
	p.setState(s, Busy)
	s.cmd.cur = c.kind
	if c.kind != Other {
		s.cmd.last = c.kind
	}
	s.cmd.domain = ""
	if c.kind == RecipOK {
		s.cmd.domain, _ = RecipokDomain(c.req.Line)
	}
	s.cmd.call = c
	c.start = now
	proc := s.proc
	if c.tick >= 0 {
		s.cmd.tag = fmt.Sprintf("tick %d", c.tick)
	} else {
		s.cmd.tag = commandTag(c.req.Line)
		p.notifyTag(s)
		p.noteCommand(s, c)
	}
	if p.cfg.EventLog != nil {
		p.elog("dispatch worker=%d pid=%d cmd=%q", s.n, proc.pid, truncate(c.req.Line, 100))
	}
	s.timers.busyProc = proc
	s.timers.busy = p.schedule(&s.timers.busyEntry, p.cfg.BusyTimeout)
	c.slot = s.n
	// The stats line comes before the command is written: once the
	// worker has the command its reply can reach the client, and the
	// record must not trail the answer it describes.
	if c.scanPath() && c.tick < 0 && !c.req.Map {
		p.stat(s, "StartFilter", "")
	}
	p.grant(c, proc)
}

// activateFailed ends c, for which s could not be started.
func (p *Pool) activateFailed(s *slot, c *call) {
	switch {
	case c.tick >= 0:
		p.emit(Event{Kind: EvTickSkipped, Worker: s.n, Band: c.tick})
	case c.req.Map:
		p.emit(Event{Kind: EvNoFreeWorkers, Worker: -1, Map: true})
	default:
		p.emit(Event{Kind: EvActivateFailed, Worker: s.n})
	}
	c.finish(Result{Err: ErrActivate})
}

// noteCommand records what the reference keeps about a client command for
// its logs: the queue id that prefixes the worker's stderr lines, and a
// scan's directory (EndFilter is logged only while it is set).
func (p *Pool) noteCommand(s *slot, c *call) {
	field := func(i, n int) (string, bool) {
		for f := range strings.FieldsSeq(c.req.Line) {
			if i == 0 {
				return truncate(f, n), true
			}
			i--
		}
		return "", false
	}
	if c.req.Map {
		s.cmd.workdir = ""
		return
	}
	qid := ""
	switch {
	case c.scanPath():
		q, ok := field(1, 31)
		if !ok {
			return // the reference's sscanf keeps both
		}
		qid = q
		if d, ok := field(2, 511); ok {
			s.cmd.workdir = d
		}
	case c.kind == SenderOK:
		s.cmd.workdir = ""
		qid, _ = field(6, 31)
	case c.kind == RecipOK:
		s.cmd.workdir = ""
		qid, _ = field(8, 31)
	default:
		s.cmd.workdir = ""
	}
	if *s.proc.side.qid.Load() != qid {
		q := qid // only a changed id is allocated
		s.proc.side.qid.Store(&q)
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// serveQueue dispatches queued requests while a worker can be picked for
// the head of the queue. The reference serves its queue only when a
// worker finishes a command (docs/protocols/mimedefang-multiplexor.md, "After each reply"), so a request queued while every slot
// was busy or being killed waited for its timeout even after a slot came
// free by a reap or a bring-up; sluice serves it then too. A worker that
// cannot be started now (activation spacing, -W, or a failed fork) leaves
// the request queued rather than failing it.
func (p *Pool) serveQueue() {
	for len(p.queue) > 0 {
		c := p.queue[0]
		s := p.findFree(c.kind)
		if s == nil {
			return
		}
		if s.state == Stopped && s.start == nil && (!p.mayActivate() || p.activate(s, activationReason(c)) != nil) {
			return
		}
		p.dispatch(s, p.popQueue())
	}
}

// popQueue takes the head of the queue off it, with its queue timeout.
func (p *Pool) popQueue() *call {
	c := p.queue[0]
	p.queue = p.queue[1:]
	c.timer.cancel(p)
	c.timer = nil
	return c
}
