package pool

import (
	"cmp"
	"os"
	"slices"
	"syscall"
	"time"
	"unsafe"
)

// reapOrder lists the slots that have a process, oldest process first:
// the order in which the reference's wait3 loop collects the children
// that have exited by the time it looks (the kernel keeps a process's
// children in the order they were forked, and wait takes the first that
// has exited). Reaping in slot order instead made workers that exited
// together leave their slots in another order, and every slot started
// after them another number (the next start takes the slot reaped last).
func (p *Pool) reapOrder() []*slot {
	order := p.reapBuf[:0]
	for _, s := range p.slots {
		if s.proc != nil {
			order = append(order, s)
		}
	}
	slices.SortFunc(order, func(a, b *slot) int { return cmp.Compare(a.life.activationNo, b.life.activationNo) })
	p.reapBuf = order
	return order
}

// reap collects every child that has exited (docs/protocols/mimedefang-multiplexor.md, "Killing and reaping"), oldest first (reapOrder).
func (p *Pool) reap() {
	for _, s := range p.reapOrder() {
		proc := s.proc
		if proc == nil || proc.reaped {
			continue
		}
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		pid, err := syscall.Wait4(proc.pid, &ws, syscall.WNOHANG, &ru)
		if err != nil && err != syscall.EINTR && err != syscall.ECHILD {
			p.emit(Event{Kind: EvWaitFailed, Worker: s.n, PID: proc.pid, Err: err})
			continue
		}
		if pid != proc.pid && err != syscall.ECHILD {
			continue
		}
		proc.reaped = true
		p.elog("reaped worker=%d pid=%d", s.n, proc.pid)
		p.logReaped(s, ws, &ru, s.state == Killed)
		if s.state == Busy && s.cmd.call != nil {
			// What the worker wrote before it died is its reply; its
			// stdout has hit or is about to hit EOF.
			p.reapInFlight(s)
			continue
		}
		p.finishReap(s)
	}
	if p.cfg.Embed {
		p.reapStrays()
	}
}

// reapStrays is -E's: the zygotes that have exited, the current one and
// those dropped, are reaped; and sluice is a child subreaper, so what a
// worker leaves running when it exits becomes sluice's child when it
// ends. Each such child that has exited is reaped; a worker (or a
// zygote) found exited is left to the next reap, which its SIGCHLD
// brings.
func (p *Pool) reapStrays() {
	p.reapZygotes()
	for {
		var info [128]byte // siginfo_t
		if _, _, e := syscall.Syscall6(syscall.SYS_WAITID, 0 /* P_ALL */, 0, uintptr(unsafe.Pointer(&info[0])),
			syscall.WEXITED|syscall.WNOHANG|0x1000000 /* WNOWAIT */, 0, 0); e != 0 {
			return
		}
		pid := int(*(*int32)(unsafe.Pointer(&info[16]))) // si_pid
		if pid == 0 || p.isZygote(pid) {
			return
		}
		for _, s := range p.slots {
			if s.proc != nil && s.proc.pid == pid {
				return
			}
		}
		if got, _ := syscall.Wait4(pid, nil, syscall.WNOHANG, nil); got != pid {
			return
		}
	}
}

// logReaped is the reference's logWorkerReaped and
// log_worker_resource_usage (with -l only); killed is true for a worker
// that was told to exit (and for every worker at shutdown).
func (p *Pool) logReaped(s *slot, ws syscall.WaitStatus, ru *syscall.Rusage, killed bool) {
	p.emit(Event{Kind: EvReaped, Worker: s.n, PID: s.proc.pid, Wait: ws, Killed: killed})
	p.emit(Event{Kind: EvResourceUsage, Worker: s.n, Requests: s.life.numRequests, Scans: s.life.numScans, Usage: ru})
}

func (p *Pool) finishReap(s *slot) {
	proc := s.proc
	p.closeProc(proc)
	s.timers.kill.cancel(p)
	s.timers.dead.cancel(p)
	s.timers.busy.cancel(p)
	s.timers.kill, s.timers.dead, s.timers.busy = nil, nil, nil
	if s.state != Killed {
		p.notify("U")
	}
	s.proc = nil
	s.life.activated, s.life.firstReq = time.Time{}, time.Time{}
	p.setState(s, Stopped)
	s.life.dead, s.life.reapPending = false, false
	// The last command kind stays until the next activation, as the
	// reference's last_cmd does: `workers` shows it on a stopped slot.
	s.cmd.cur = Other
	p.stopped = append([]int{s.n}, p.stopped...)
	p.stat(s, "ReapWorker", "")
	p.hist[Scan].add(p.clk.Now(), func(b *bucket) { b.reaped++ })
	if p.live() < p.cfg.MinWorkers {
		p.scheduleBringUp()
	}
	p.serveQueue()
}

// closeProc closes the parent's ends of a reaped worker's pipes, which
// ends its stderr and status readers.
func (p *Pool) closeProc(proc *process) {
	p.closeStdin(proc)
	p.react.forget(proc.io.out)
	syscall.Close(proc.io.out)
	proc.io.out = -1
	proc.side.stderr.Close()
	if proc.side.status != nil {
		proc.side.status.Close()
	}
}

// shutdown is the SIGTERM sequence of docs/protocols/mimedefang-multiplexor.md, "Signals", minus the socket cleanup
// (the front ends own their sockets).
func (p *Pool) shutdown(sigchld <-chan os.Signal) {
	for _, c := range p.queue {
		c.finish(Result{Err: ErrClosed})
	}
	p.queue = nil
	for _, s := range p.slots {
		if s.start != nil && s.start.call != nil {
			s.start.call.finish(Result{Err: ErrClosed})
			s.start.call = nil
		}
		if s.cmd.call != nil {
			s.cmd.call.finish(Result{Err: ErrClosed})
			s.cmd.call = nil
		}
		if s.proc != nil {
			signalProc(s.proc, syscall.SIGCONT)
			p.closeStdin(s.proc)
		}
	}
	steps := []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}
	for step := 0; ; step++ {
		deadline := time.Now().Add(p.cfg.KillGrace)
		for p.reapAllNow() > 0 && time.Now().Before(deadline) {
			select {
			case <-sigchld:
			case <-time.After(100 * time.Millisecond):
			}
		}
		if p.reapAllNow() == 0 {
			return
		}
		if step >= len(steps) {
			return
		}
		for _, s := range p.slots {
			if s.proc != nil && !s.proc.reaped {
				signalProc(s.proc, steps[step])
			}
		}
		if steps[step] == syscall.SIGKILL {
			// SIGKILL cannot be ignored: wait for the exits.
			for _, s := range p.reapOrder() {
				if !s.proc.reaped {
					var ws syscall.WaitStatus
					var ru syscall.Rusage
					if pid, _ := syscall.Wait4(s.proc.pid, &ws, 0, &ru); pid == s.proc.pid {
						p.logReaped(s, ws, &ru, true)
					}
					s.proc.reaped = true
				}
			}
			p.reapAllNow()
			return
		}
	}
}

// reapAllNow reaps what has exited during shutdown and returns how many
// children are left.
func (p *Pool) reapAllNow() int {
	left := 0
	for _, s := range p.reapOrder() {
		proc := s.proc
		if proc == nil {
			continue
		}
		if !proc.reaped {
			var ws syscall.WaitStatus
			var ru syscall.Rusage
			pid, err := syscall.Wait4(proc.pid, &ws, syscall.WNOHANG, &ru)
			if pid == proc.pid || err == syscall.ECHILD {
				proc.reaped = true
				if pid == proc.pid {
					p.logReaped(s, ws, &ru, true)
				}
			}
		}
		if !proc.reaped {
			left++
			continue
		}
		p.closeProc(proc)
		s.proc = nil
		p.setState(s, Stopped)
		p.stat(s, "ReapWorker", "")
	}
	return left
}
