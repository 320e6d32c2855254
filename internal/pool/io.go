package pool

import (
	"bytes"
	"context"
	"errors"
	"os"
	"time"
)

// The worker I/O of a request is done by the requester's own goroutine
// (Do), not by the owner: the owner grants it a worker, the client
// writes the command and reads the reply, and reports the outcome to the
// owner in one message. Who does what with a granted call:
//
//   - The owner dispatches the call: the slot goes Busy, the busy timer
//     starts, call.proc is set, the owner writes what of the command line
//     the worker's stdin takes without waiting (preWrite), and the grant
//     (the process) is sent on call.ch. From then until the call's
//     handoff leaves running, the process's pipes' data (stdin writes,
//     stdout reads, process.buf and process.wbuf) belong to whoever holds
//     the grant; the slot itself stays the owner's and is touched by
//     nobody else.
//   - The holder writes the rest of the line, if any, and reads one reply
//     line, then claims
//     the call (handoff.claimHolder). If that succeeds, its result
//     is final; it is computed from the I/O alone (ioResult), exactly as
//     the owner's handleIO computes it. Either way the holder then sends
//     the ioEvent to the owner, which does the bookkeeping (counters,
//     state change, notifications, next queued request) as before. The
//     event is sent before the client returns, so anything the client
//     asks the pool afterwards sees the worker's new state.
//   - The owner may end a call first (busy timeout, kill, shutdown); it
//     claims it (handoff.claimOwner), sends the result on
//     call.ch and interrupts the holder's read (a read deadline in the
//     past; stdin is closed by the kill that always follows). The holder's
//     claim then fails: it reports its (late) event and returns the
//     owner's result. Since every owner claim kills the worker, the
//     interrupted pipes are never used again.
//   - A client whose ctx ends (the server closing) must not wait for the
//     worker: the ctx callback marks the call abandoned (handoff.abandon) and interrupts
//     the read; the client hands what it has read so far to a new
//     goroutine, which resumes the read and reports the event as a client
//     would (the result is dropped), and Do returns ErrClosed. The helper
//     clears the deadline and then re-checks the state, and the owner
//     claims before it interrupts, so an owner's interruption is never
//     lost.
//
// Ticks, which have no client, are served by a goroutine per tick. A call
// made with Submit has no waiting client either: the owner is its holder
// (ownerio.go), reading the reply when its reactor finds the worker's
// stdout readable, and ends it with the same claim and event a holder
// sends; only when its command did not fit in the pipe at once does a
// goroutine take its I/O, as for a tick.

// ioProgress is how far a call's worker I/O has got, so that it can be
// resumed by another goroutine.
type ioProgress struct {
	// The owner writes what of the command the pipe takes at once when it
	// grants the call (preWrite), so pr.wbuf holds the line from then on:
	// off is how much of it the worker has, werr the write's error, if any.
	off     int
	werr    error
	written bool
	got     int  // reply bytes in process.buf
	discard bool // the line was cut at maxReply: throw away its rest
}

// aLongTimeAgo is a deadline that has passed: it interrupts a read.
var aLongTimeAgo = time.Unix(1, 0)

// interrupt makes the holder of c's grant stop reading (owner only,
// after it claimed c).
func interrupt(pr *process) {
	_ = pr.stdout.SetReadDeadline(aLongTimeAgo)
}

// finish ends c with r on the owner goroutine: unless the grant's holder
// has claimed it already, r is sent to the client (or given to onDone).
func (c *call) finish(r Result) {
	if c.proc != nil {
		if !c.io.claimOwner() {
			// The holder's own result stands.
			if c.onDone != nil {
				c.onDone(r)
			}
			return
		}
		interrupt(c.proc)
	}
	if c.onDone != nil {
		c.onDone(r)
		return
	}
	c.res = r
	c.ch <- struct{}{}
}

// grant hands c's worker I/O on pr to its client, or for a tick to a
// goroutine of its own (owner only), once the owner has written what of
// the command the pipe takes at once.
func (p *Pool) grant(c *call, pr *process) {
	c.proc = pr
	p.preWrite(c, pr)
	if c.onDone != nil {
		if c.ownerIO {
			if c.ior.written && p.watchReply(c, pr) {
				return
			}
			c.ownerIO = false // a goroutine holds it after all
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			ev, _ := p.workerIO(c, pr, false, nil)
			c.io.claimHolder()
			p.send(ev)
		}()
		return
	}
	c.ch <- struct{}{}
}

// preWrite is the owner writing c's command to pr's stdin as far as the
// pipe takes it without waiting, before it grants c (owner only; the pipe
// is the owner's until the grant is sent). The worker starts on the
// command at once instead of when the client's goroutine is next
// scheduled; the holder writes the rest, if any, under the command
// timeout, and reports a write error as its own (workerIO).
func (p *Pool) preWrite(c *call, pr *process) {
	st := &c.ior
	pr.wbuf = append(append(pr.wbuf[:0], c.req.Line...), '\n')
	st.off, st.werr = pr.pipes.tryWrite(pr.wbuf)
	st.written = st.werr == nil && st.off == len(pr.wbuf)
}

// clientIO does c's worker I/O on pr for Do and returns its result.
func (p *Pool) clientIO(ctx context.Context, c *call, pr *process) Result {
	c.watch = ctxWatch{ctx: ctx, c: c}
	ev, cut := p.workerIO(c, pr, true, &c.watch)
	p.disarm(&c.watch)
	if !cut && c.io.abandoned() {
		// ctx ended after the reply was read: ctxEnded (done, since
		// disarm took its lock) set a past read deadline that no read
		// saw. Clear it, or the worker's next command would fail at once.
		_ = pr.stdout.SetReadDeadline(time.Time{})
	}
	if cut {
		p.wg.Add(1)
		go p.finishAbandoned(c, pr)
		return Result{Err: ErrClosed}
	}
	if c.io.claimHolder() {
		r := ioResult(&ev)
		if !p.send(ev) {
			return Result{Err: ErrClosed}
		}
		return r
	}
	p.send(ev)
	select {
	case <-c.ch:
		return c.res
	case <-p.done:
		return Result{Err: ErrClosed}
	}
}

// finishAbandoned resumes the worker I/O of a call whose client left and
// reports it; its result is dropped.
func (p *Pool) finishAbandoned(c *call, pr *process) {
	defer p.wg.Done()
	_ = pr.stdout.SetReadDeadline(time.Time{})
	var ev ioEvent
	if c.io.abandoned() {
		// An owner's claim from now on interrupts this read.
		ev, _ = p.workerIO(c, pr, false, nil)
	} else {
		// The owner claimed it (its interruption may just have been
		// cleared): report what there is.
		ev = ioEvent{slot: c.slot, proc: pr, reply: bytes.Clone(pr.buf[:c.ior.got]), eof: true}
	}
	c.io.claimHolder()
	p.send(ev)
}

// ioResult is a call's result from its worker I/O alone, as handleIO
// decides it: a failed write is ErrTalk, EOF before any byte
// ErrNoResponse (for a map request too, whose worker is then killed),
// anything else the reply.
func ioResult(ev *ioEvent) Result {
	switch {
	case ev.writeErr != nil:
		return Result{Err: ErrTalk}
	case ev.eof && len(ev.reply) == 0:
		return Result{Err: ErrNoResponse}
	}
	return Result{Reply: ev.reply}
}

// workerIO does, or resumes, c's worker I/O on pr (after preWrite):
// write the rest of the line under the command timeout, then read one
// reply line as the reference does (up to maxReply bytes; bytes after the newline in the same read are
// dropped; a longer line is cut and its rest discarded). cut is true when
// the read was interrupted for an abandoned call (only when resumable):
// c.ior keeps the progress for finishAbandoned. Any other read error is
// the end of the worker's output. w, if not nil, is armed before a read
// waits.
func (p *Pool) workerIO(c *call, pr *process, resumable bool, w *ctxWatch) (ev ioEvent, cut bool) {
	ev = ioEvent{slot: c.slot, proc: pr}
	st := &c.ior
	if !st.written {
		if st.werr == nil {
			st.werr = pr.writeCmd(st.off, p.cfg.CmdTimeout)
		}
		if st.werr != nil {
			ev.writeErr = st.werr
			return ev, false
		}
		st.written = true
	}
	pr.watch, pr.pool = w, p
	for {
		buf := st.replyBuf(pr)
		m, err := pr.readReply(buf[st.got:])
		if err != nil && resumable && errors.Is(err, os.ErrDeadlineExceeded) && c.io.abandoned() {
			// Interrupted for a helper to resume: keep what came.
			if st.absorb(&ev, buf, m, nil) {
				return ev, false
			}
			return ev, true
		}
		if st.absorb(&ev, buf, m, err) {
			return ev, false
		}
	}
}

// replyBuf is where the next read of the reply goes (from st.got on):
// the reply buffer, or past it the scratch area while the rest of a cut
// line is thrown away.
func (st *ioProgress) replyBuf(pr *process) []byte {
	if st.discard {
		return pr.buf // maxReply bytes of line, then a scratch area
	}
	return pr.buf[:maxReply]
}

// partial is the reply read so far.
func (st *ioProgress) partial(pr *process) []byte { return bytes.Clone(pr.buf[:st.got]) }

// absorb takes the m bytes a read put at buf[st.got:] and its error, as
// the reference reads a reply (up to maxReply bytes; bytes after the
// newline in the same read are dropped; a longer line is cut and its rest
// discarded): true when the reply is complete in ev (ev.eof when the
// worker's output ended, err being any read error).
func (st *ioProgress) absorb(ev *ioEvent, buf []byte, m int, err error) bool {
	if m > 0 && st.discard {
		if bytes.IndexByte(buf[st.got:st.got+m], '\n') >= 0 {
			ev.reply = bytes.Clone(buf[:st.got])
			return true
		}
		m = 0
	}
	if m > 0 {
		if i := bytes.IndexByte(buf[st.got:st.got+m], '\n'); i >= 0 {
			ev.reply = bytes.Clone(buf[:st.got+i+1])
			return true
		}
		st.got += m
		if st.got == maxReply {
			st.discard = true
		}
	}
	if err != nil {
		ev.reply = bytes.Clone(buf[:st.got])
		ev.eof = true
		return true
	}
	return false
}
