package pool

import (
	"fmt"
	"syscall"
	"time"
)

// activate starts a process in the stopped slot s. With -E the worker is
// asked of the zygote and the slot is up once it answers (forked):
// meanwhile s.start is set, and a request given to s waits in it.
func (p *Pool) activate(s *slot, reason string) error {
	now := p.now()
	if !p.mayActivate() {
		p.emit(Event{Kind: EvActivationSpacing, Worker: s.n})
		return fmt.Errorf("pool: activation spacing")
	}
	if p.cfg.Embed && !p.embedOff {
		err := p.askZygote(s)
		if err == nil {
			p.lastActivation = now
			p.unstop(s)
			s.start = &slotStart{reason: reason}
			p.starting++
			return nil
		}
		if !p.embedOff {
			p.emit(Event{Kind: EvStartFailed, Worker: s.n, Err: err})
			return err
		}
		// No zygote could be started: as without -E.
	}
	proc, err := forkExec(&p.cfg)
	if err != nil {
		p.emit(Event{Kind: EvStartFailed, Worker: s.n, Err: err})
		return err
	}
	p.lastActivation = now
	p.unstop(s)
	p.started(s, proc, reason)
	return nil
}

// unstop takes s off the stopped list.
func (p *Pool) unstop(s *slot) {
	for i, n := range p.stopped {
		if n == s.n {
			p.stopped = append(p.stopped[:i], p.stopped[i+1:]...)
			break
		}
	}
}

// started puts the new process proc in s, Idle.
func (p *Pool) started(s *slot, proc *process, reason string) {
	now := p.now()
	p.activations++
	s.proc = proc
	s.life.numRequests, s.life.numScans = 0, 0
	s.life.activated, s.life.firstReq = now, time.Time{}
	s.life.activationNo = p.activations
	s.life.generation = p.generation
	s.cmd.last, s.cmd.cur = Other, Other
	s.life.dead, s.life.reapPending = false, false
	p.setState(s, Idle)
	s.idleSince = now
	p.hist[Scan].add(now, func(b *bucket) { b.activated++ })
	p.emit(Event{Kind: EvStartWorker, Worker: s.n, PID: proc.pid, Running: p.running(), Reason: reason})
	p.stat(s, "StartWorker", `reason="`+reason+`"`)
	if p.cfg.Autoscale {
		p.emit(Event{Kind: EvAutoscale, Worker: s.n, Scale: ScaledOut, Running: p.running(), EMA: p.ema, Queued: len(p.queue)})
	}
	side := proc.side
	p.wg.Add(1)
	go p.drainStderr(s.n, side)
	if side.status != nil {
		p.wg.Add(1)
		go p.readStatus(s.n, side)
	}
}

// forked completes the start of s's worker (-E): proc is up, or err says
// why not. The request it was started for is sent to it, or fails as a
// request whose worker could not be activated does.
func (p *Pool) forked(s *slot, proc *process, err error) {
	st := s.start
	s.start = nil
	p.starting--
	if err != nil {
		p.stopped = append([]int{s.n}, p.stopped...)
		p.emit(Event{Kind: EvStartFailed, Worker: s.n, Err: err})
		if st.call != nil {
			p.activateFailed(s, st.call)
		}
		if p.live() < p.cfg.MinWorkers {
			p.scheduleBringUp()
		}
		return
	}
	p.started(s, proc, st.reason)
	if st.call != nil {
		p.dispatch(s, st.call)
	}
	p.serveQueue()
}

// live counts the running workers and those being started.
func (p *Pool) live() int { return p.running() + p.starting }

// kill is docs/protocols/mimedefang-multiplexor.md, "Killing and reaping": SIGCONT (and SIGTERM at once if busy), close stdin, then
// escalate every KillGrace until the process is reaped.
func (p *Pool) kill(s *slot, reason string) {
	proc := s.proc
	if proc == nil || s.state == Killed {
		return
	}
	wasBusy := s.state == Busy
	now := p.clk.Now()
	age := secs(now, s.life.activated)
	p.emit(Event{Kind: EvKillWorker, Worker: s.n, PID: proc.pid, State: s.state, Requests: s.life.numRequests,
		Age: age, ReqAge: secs(now, s.life.firstReq), Reason: reason})
	signalProc(proc, syscall.SIGCONT)
	if wasBusy {
		signalProc(proc, syscall.SIGTERM)
	}
	if s.cmd.call != nil {
		c := s.cmd.call
		s.cmd.call = nil
		c.finish(Result{Err: ErrClosed})
	}
	p.stopIO(proc)
	s.timers.busy.cancel(p)
	s.timers.busy = nil
	s.timers.dead.cancel(p)
	s.timers.dead = nil
	p.setState(s, Killed)
	p.closeStdin(proc)
	s.timers.kill = p.after(p.cfg.KillGrace, func() {
		if s.proc != proc || proc.reaped {
			return
		}
		signalProc(proc, syscall.SIGCONT)
		if wasBusy {
			p.emit(Event{Kind: EvKillEscalate, Worker: s.n, PID: proc.pid, Signal: syscall.SIGKILL})
			signalProc(proc, syscall.SIGKILL)
			return
		}
		p.emit(Event{Kind: EvKillEscalate, Worker: s.n, PID: proc.pid, Signal: syscall.SIGTERM})
		signalProc(proc, syscall.SIGTERM)
		s.timers.kill = p.after(p.cfg.KillGrace, func() {
			if s.proc == proc && !proc.reaped {
				p.emit(Event{Kind: EvKillEscalate, Worker: s.n, PID: proc.pid, Signal: syscall.SIGKILL})
				signalProc(proc, syscall.SIGCONT)
				signalProc(proc, syscall.SIGKILL)
			}
		})
	})
	p.stat(s, "KillWorker", fmt.Sprintf(`req=%d age=%d reason="%s"`, s.life.numRequests, age, reason))
}

func secs(now, t time.Time) int64 {
	if t.IsZero() {
		return -1
	}
	return now.Unix() - t.Unix()
}

// signalProc signals a child that has not been reaped (so its pid cannot
// have been reused).
func signalProc(proc *process, sig syscall.Signal) {
	if !proc.reaped {
		_ = syscall.Kill(proc.pid, sig)
	}
}

// closeStdin closes a worker's stdin (owner only): it reads EOF.
func (p *Pool) closeStdin(proc *process) {
	if !proc.stdinClosed {
		proc.stdinClosed = true
		p.react.forget(proc.io.in)
		proc.io.wtimer.cancel(p)
		syscall.Close(proc.io.in)
		proc.io.in = -1
	}
}

// mayActivate: activation spacing (-W) lets a worker start now.
//
// A spacing of whole seconds (-W) is counted as the reference counts it,
// in whole seconds of the clock: an activation at 10.9 s allows the next
// one at 11.0 s.
func (p *Pool) mayActivate() bool {
	spacing := p.cfg.ActivationSpacing
	if spacing <= 0 || p.lastActivation.IsZero() {
		return true
	}
	if spacing%time.Second == 0 {
		return p.now().Unix()-p.lastActivation.Unix() >= int64(spacing/time.Second)
	}
	return p.now().Sub(p.lastActivation) >= spacing
}

// bringUpCheck is docs/protocols/mimedefang-multiplexor.md, "Minimum workers and slow start": start one worker if fewer than min run, and check
// again after SlewTime.
func (p *Pool) bringUpCheck() {
	p.bringUp = nil
	if p.live() >= p.cfg.MinWorkers || len(p.stopped) == 0 {
		return
	}
	_ = p.activate(p.slots[p.stopped[0]], fmt.Sprintf("Bringing workers up to minWorkers (%d)", p.cfg.MinWorkers))
	if p.live() < p.cfg.MinWorkers {
		p.scheduleBringUp()
	}
	p.serveQueue()
}

func (p *Pool) scheduleBringUp() {
	if p.bringUp == nil {
		p.bringUp = p.after(p.cfg.SlewTime, p.bringUpCheck)
	}
}

// idleTimer is docs/protocols/mimedefang-multiplexor.md, "Idle timeout", run every IdleTime from the start.
//
// alive counts the running workers (Killed ones included, as the
// reference's count does) less those this pass kills: a killed worker
// still counts in running() until it is reaped, so the idle pass must
// count its own kills or it would take the pool below MinWorkers.
func (p *Pool) idleTimer() {
	now := p.clk.Now()
	alive := p.live()
	if p.cfg.MaxLifetime > 0 {
		for _, s := range p.idleList() {
			if !s.life.firstReq.IsZero() && now.Sub(s.life.firstReq) > p.cfg.MaxLifetime {
				alive--
				p.kill(s, fmt.Sprintf("Worker has exceeded maximum lifetime of %d seconds", int(p.cfg.MaxLifetime/time.Second)))
			}
		}
	}
	for _, s := range p.idleList() {
		if alive <= p.cfg.MinWorkers {
			break
		}
		if now.Sub(s.idleSince) >= p.cfg.IdleTime {
			alive--
			p.kill(s, "Idle timeout")
		}
	}
	if alive < p.cfg.MinWorkers {
		p.scheduleBringUp()
	}
	p.after(p.cfg.IdleTime, p.idleTimer)
}

// reread is docs/protocols/mimedefang-multiplexor.md, "Reread and generations": a new generation, idle workers killed, then R.
func (p *Pool) reread() {
	p.generation++
	if z := p.zyg; z != nil {
		// The next worker comes from a zygote that reads the filter
		// again, as the reference re-creates its interpreter: the old
		// one is closed without waiting, the new one compiles while the
		// owner serves, and the workers asked of the old one are asked
		// of it.
		forks := z.forks
		z.forks = nil
		p.dropZygote()
		for _, f := range forks {
			f.release()
		}
		if len(forks) == 0 {
			if err := p.startZygote(); err != nil {
				p.embedOff = true
				p.emit(Event{Kind: EvEmbedFailed, Worker: -1, Err: err})
			}
		}
		for _, f := range forks {
			p.reask(f.s)
		}
	}
	for _, s := range p.idleList() {
		p.kill(s, "Forcing reread of filter rules")
	}
	p.notify("R")
}
