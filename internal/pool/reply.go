package pool

import (
	"fmt"
	"strconv"
	"time"
)

// handleIO is the end of the command in flight on s (docs/protocols/mimedefang-multiplexor.md, "Forwarded commands" and "After each reply"):
// its reply, whether the worker's stdout ended before a newline (eof), or
// the error writing the command.
func (p *Pool) handleIO(s *slot, reply []byte, eof bool, writeErr error) {
	c := s.cmd.call
	s.cmd.call = nil
	s.timers.busy.cancel(p)
	s.timers.busy = nil
	if p.cfg.EventLog != nil {
		p.elog("reply worker=%d bytes=%d eof=%v writeErr=%v", s.n, len(reply), eof, writeErr)
	}
	if writeErr != nil {
		p.emit(Event{Kind: EvTalkError, Worker: s.n, Err: writeErr})
		c.finish(Result{Err: ErrTalk})
		p.kill(s, "Error talking to worker process")
		if s.life.reapPending {
			p.finishReap(s)
		}
		return
	}
	noData := eof && len(reply) == 0
	if eof {
		// Its stdout is gone: it is never chosen again, and if it does not
		// exit by itself it is killed.
		s.life.dead = true
	}
	if c.req.Map && noData {
		c.finish(Result{Err: ErrNoResponse})
		p.kill(s, "Busy timeout")
		if s.life.reapPending {
			p.finishReap(s)
		}
		return
	}
	var r Result
	if noData {
		if c.tick < 0 {
			p.logDied(s)
		}
		r.Err = ErrNoResponse
	} else {
		r.Reply = reply
	}
	s.life.numRequests++
	p.finishCommand(s, c)
	p.setState(s, Idle)
	s.idleSince = p.now()
	s.cmd.cur = Other
	p.checkExpiry(s)
	if c.tick < 0 && !c.req.Map && s.cmd.workdir != "" && p.cfg.Stats != nil {
		p.stat(s, "EndFilter", "numRequests="+strconv.Itoa(s.life.numRequests))
	}
	// The call is answered after the bookkeeping: the state change,
	// EndFilter and the next queued command to this worker come first, as
	// the reference's event loop writes the reply after it has handled
	// the answer.
	c.finish(r)
	if s.life.reapPending {
		p.finishReap(s)
		return
	}
	if s.life.dead && s.state == Idle {
		proc := s.proc
		s.timers.dead = p.after(p.cfg.KillGrace, func() {
			if s.proc == proc && s.state == Idle {
				p.kill(s, "EventTcp_ReadBuf failed")
			}
		})
	}
}

// logDied is the reference's error for a worker that closed its stdout
// without answering; it is logged even without -l.
func (p *Pool) logDied(s *slot) {
	p.emit(Event{Kind: EvWorkerDied, Worker: s.n, OOM: s.proc.side.oom.Load()})
}

// finishCommand counts a command that ended (answered, timed out or died).
func (p *Pool) finishCommand(s *slot, c *call) {
	now := p.now()
	if c.kind != Other {
		busy := p.busy()
		ms := now.Sub(c.start).Milliseconds()
		p.hist[c.kind].add(now, func(b *bucket) {
			b.count++
			b.busy += busy
			b.ms += ms
		})
	}
	if c.kind == Scan {
		s.life.numScans++
		p.msgs++
	}
}

// checkExpiry is docs/protocols/mimedefang-multiplexor.md, "After each reply": serve the queue (unless this worker is far past its
// request limit), else recycle on request count, lifetime or generation.
func (p *Pool) checkExpiry(s *slot) {
	if len(p.queue) > 0 && s.life.numRequests < 3*p.cfg.MaxRequests {
		c := p.popQueue()
		if t := p.findFree(c.kind); t != nil {
			p.dispatch(t, c)
		} else {
			p.emit(Event{Kind: EvNoFreeWorkers, Worker: -1})
			c.finish(Result{Err: ErrNoFreeWorkers})
		}
		return
	}
	now := p.now()
	switch {
	case s.life.numRequests >= p.cfg.MaxRequests:
		p.kill(s, fmt.Sprintf("Worker has processed %d requests", s.life.numRequests))
	case p.cfg.MaxLifetime > 0 && !s.life.firstReq.IsZero() && now.Sub(s.life.firstReq) > p.cfg.MaxLifetime:
		p.kill(s, fmt.Sprintf("Worker has exceeded maximum lifetime of %d seconds", int(p.cfg.MaxLifetime/time.Second)))
	case s.life.generation < p.generation:
		p.kill(s, "New generation -- forcing reread of filter rules")
	}
}

// busyTimeout is docs/protocols/mimedefang-multiplexor.md, "Busy timeout".
func (p *Pool) busyTimeout(s *slot, proc *process) {
	s.timers.busy = nil
	if s.proc != proc || s.state != Busy || s.cmd.call == nil {
		return
	}
	c := s.cmd.call
	s.cmd.call = nil
	p.elog("busy timeout worker=%d", s.n)
	if c.req.Map {
		c.finish(Result{Err: ErrBusyTimeout})
		p.kill(s, "Busy timeout")
		return
	}
	busy := p.busy()
	s.life.numRequests++
	p.finishCommand(s, c)
	c.finish(Result{Err: ErrBusyTimeout, BusyWorkers: busy})
	if c.tick < 0 {
		p.notify("B")
	}
	p.kill(s, "Busy timeout")
	if c.tick < 0 && s.cmd.workdir != "" && p.cfg.Stats != nil {
		p.stat(s, "EndFilter", "numRequests="+strconv.Itoa(s.life.numRequests))
	}
}
