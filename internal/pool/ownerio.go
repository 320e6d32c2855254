package pool

import (
	"io"
	"syscall"
	"time"
	"unsafe"
)

// Submit sends req to a worker, or queues it, as Do does, without
// waiting: done is called exactly once with the outcome, on the pool's
// owner goroutine, so it must not block and must not call the pool. The
// worker's reply is read by the owner itself (the reactor), which costs
// no goroutine switch per request while the pool is busy. Submit waits
// only while the owner's inbox is full; false when the pool has stopped
// (done is then not called).
//
// A front end that answers many clients from few goroutines uses Submit
// (the mux's accepting goroutine, when the pool cannot serve its socket
// on the owner; there it is Owner.Submit); Do is for a caller that waits
// anyway.
func (p *Pool) Submit(req Request, done func(Result)) bool {
	c := &call{req: req, kind: KindOf(req.Line), tick: -1, onDone: done, ownerIO: true}
	return p.post(ownerMsg{c: c})
}

// post puts m, a message whose sender does not wait for the owner, in the
// inbox; false when the pool has stopped. Under the read lock: the
// owner, once stopped, takes the write lock before it ends what is left
// in its inbox (drainInbox), so a message is either refused here or ended
// there.
func (p *Pool) post(m ownerMsg) bool {
	p.inMu.RLock()
	defer p.inMu.RUnlock()
	if p.inClosed {
		return false
	}
	select {
	case p.in <- m:
		return true
	default:
	}
	select {
	case p.in <- m:
		return true
	case <-p.done:
		return false
	}
}

// drainInbox ends the messages of post left in the inbox once the owner
// loop has stopped (p.done is closed, so no sender waits on a full
// inbox): a Submit call's done gets ErrClosed, a SnapshotTo's nil, an
// OnOwner message's drop runs; post refuses from now on.
func (p *Pool) drainInbox() {
	p.inMu.Lock()
	p.inClosed = true
	p.inMu.Unlock()
	for {
		select {
		case m := <-p.in:
			switch {
			case m.c != nil && m.c.ownerIO:
				m.c.onDone(Result{Err: ErrClosed})
			case m.drop != nil:
				m.drop()
			}
		default:
			return
		}
	}
}

// watchReply makes the owner the holder of c's worker I/O on pr (its
// command is written: preWrite): the reply is read when the reactor
// finds pr's stdout readable. False when pr's stdout cannot be watched
// (the caller then hands the I/O to a goroutine, as for a tick).
func (p *Pool) watchReply(c *call, pr *process) bool {
	if p.react == nil {
		return false
	}
	if pr.rfd < 0 {
		_ = pr.pipes.outRC.Control(func(fd uintptr) { pr.rfd = int(fd) })
		if pr.rfd < 0 {
			return false
		}
	}
	if pr.onReadable == nil {
		s := p.slots[c.slot]
		pr.onReadable = func() { p.replyReady(s, pr) }
	}
	return p.react.watch(pr.rfd, pr.onReadable) == nil
}

// replyReady reads what pr's stdout has for the owner-held call in flight
// on pr, as workerIO reads it for a holder, and ends the call once the
// reply is complete; it re-arms the watch while it is not.
func (p *Pool) replyReady(s *slot, pr *process) {
	if s.proc == pr && s.life.reapPending && s.cmd.call == nil {
		// The late end of a reaped worker's output, after the owner ended
		// its call (busy timeout): what a holder's late event does.
		p.finishReap(s)
		return
	}
	if s.proc != pr || s.state != Busy || s.cmd.call == nil || s.cmd.call.proc != pr || !s.cmd.call.ownerIO {
		return // a spurious or late readiness: nobody waits for it here
	}
	c := s.cmd.call
	st := &c.ior
	ev := ioEvent{slot: c.slot, proc: pr}
	for range maxReplyReads {
		buf := st.replyBuf(pr)
		m, errno := rawRead(pr.rfd, buf[st.got:])
		if errno == syscall.EAGAIN {
			break
		}
		var err error
		switch {
		case errno != 0:
			err = errno
		case m == 0 && len(buf) > st.got:
			err = io.EOF
		}
		if st.absorb(&ev, buf, m, err) {
			p.ownerIOEnd(c, ev)
			return
		}
	}
	// Nothing more now, or a worker pouring out a line without end: the
	// watch is armed again (a level-triggered watch with data waiting
	// fires at the next poll), and the owner serves the others meanwhile.
	if err := p.react.watch(pr.rfd, pr.onReadable); err != nil {
		p.ownerIOEnd(c, ioEvent{slot: c.slot, proc: pr, reply: st.partial(pr), eof: true})
	}
}

// maxReplyReads bounds the reads of one reply per readiness (replyReady),
// so that a worker writing without end cannot hold the owner.
const maxReplyReads = 8

// ownerIOEnd ends the owner-held I/O of c with ev: the holder's claim,
// then the bookkeeping a holder's event gets (handleIO), which calls c's
// done.
func (p *Pool) ownerIOEnd(c *call, ev ioEvent) {
	c.io.claimHolder()
	p.handleIO(ev)
}

// reapOwnerIO is reap finding the worker of an owner-held call gone: what
// it wrote before it died is read now if its stdout has ended; else the
// reactor reads it as it comes, and after a second the call ends with
// what was read (a grandchild may hold the pipe open), as a holder's read
// deadline would end it.
func (p *Pool) reapOwnerIO(s *slot) {
	c, pr := s.cmd.call, s.proc
	p.replyReady(s, pr)
	if s.cmd.call != c || s.proc != pr {
		return // ended, and handleIO finished the reap
	}
	p.after(time.Second, func() {
		if s.proc != pr || !s.life.reapPending {
			return // ended, and the reap finished
		}
		p.react.forget(pr.rfd)
		if s.cmd.call == c {
			p.ownerIOEnd(c, ioEvent{slot: c.slot, proc: pr, reply: c.ior.partial(pr), eof: true})
			return
		}
		// The owner ended the call meanwhile (busy timeout): nothing waits
		// for the output, the reap can finish.
		p.finishReap(s)
	})
}

// forgetProc takes pr's stdout out of the reactor before its pipes close.
func (p *Pool) forgetProc(pr *process) {
	if p.react != nil && pr.rfd >= 0 {
		p.react.forget(pr.rfd)
		pr.rfd = -1
	}
}

// rawRead is read(2) on a non-blocking descriptor, retried on EINTR.
func rawRead(fd int, b []byte) (int, syscall.Errno) {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
		if e != syscall.EINTR {
			if e != 0 {
				return 0, e
			}
			return int(n), 0
		}
	}
}
