package pool

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"
	"time"

	"sluice/internal/rawio"
)

// pipes is a worker's stdin and stdout as the owner drives them: bare
// non-blocking descriptors in the owner's epoll set, the command being
// written and the reply being read. It is a field of process, which only
// the owner holds, so nothing else can reach it.
type pipes struct {
	in, out int    // the parent's ends
	buf     []byte // the reply: maxReply bytes, then a scratch area
	wbuf    []byte // the command line, newline included
	woff    int    // how much of wbuf the worker has
	got     int    // reply bytes in buf
	discard bool   // the line was cut at maxReply: throw away its rest
	// wtimer bounds a write that waits (CmdTimeout); onReadable and
	// onWritable are the owner's handlers for out and in, bound once.
	wtimer                 *timerEntry
	onReadable, onWritable func()
}

func newPipes(in, out int) pipes {
	return pipes{in: in, out: out, buf: make([]byte, maxReply+512)}
}

// errCmdTimeout is the write error of a command the worker did not take
// within CmdTimeout.
var errCmdTimeout = errors.New("pool: writing the command to the worker timed out")

// Submit sends req to a worker, or queues it, without waiting: done is
// called exactly once with the outcome, on the pool's owner goroutine, so
// it must not block and must not call the pool. Submit waits only while
// the owner's inbox is full; false when the pool has stopped (done is
// then not called).
func (p *Pool) Submit(req Request, done func(Result)) bool {
	return p.post(ownerMsg{c: newCall(req, done)})
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

// drainInbox ends the messages left in the inbox once the owner loop has
// stopped (p.done is closed, so no sender waits on a full inbox): a
// call's done gets ErrClosed, an OnOwner message's drop runs; post
// refuses from now on.
func (p *Pool) drainInbox() {
	p.inMu.Lock()
	p.inClosed = true
	p.inMu.Unlock()
	for {
		select {
		case m := <-p.in:
			switch {
			case m.c != nil:
				m.c.finish(Result{Err: ErrClosed})
			case m.drop != nil:
				m.drop()
			}
		default:
			return
		}
	}
}

// grant starts c's worker I/O on pr (owner only): the command is written
// as far as the pipe takes it now, the rest when the reactor finds stdin
// writable again, and the reply is read when it finds stdout readable.
func (p *Pool) grant(c *call, pr *process) {
	c.proc = pr
	w := &pr.io
	w.wbuf = append(append(w.wbuf[:0], c.req.Line...), '\n')
	w.woff, w.got, w.discard = 0, 0, false
	if w.onReadable == nil {
		s := p.slots[c.slot]
		w.onReadable = func() { p.replyReady(s, pr) }
		w.onWritable = func() { p.writeMore(s, pr) }
	}
	p.writeMore(p.slots[c.slot], pr)
}

// writeMore writes what of the command in flight on pr the pipe takes;
// once it is all written the reply is awaited.
func (p *Pool) writeMore(s *slot, pr *process) {
	if s.proc != pr || s.cmd.call == nil || pr.stdinClosed {
		return // the owner ended the call
	}
	w := &pr.io
	for w.woff < len(w.wbuf) {
		n, errno := rawio.WriteFD(w.in, w.wbuf[w.woff:])
		if errno == syscall.EAGAIN {
			if err := p.react.watch(w.in, true, w.onWritable); err != nil {
				p.ioEnd(s, nil, false, err)
				return
			}
			if w.wtimer == nil {
				w.wtimer = p.after(p.cfg.CmdTimeout, func() {
					w.wtimer = nil
					if s.proc == pr && s.cmd.call != nil {
						p.react.forget(w.in)
						p.ioEnd(s, nil, false, errCmdTimeout)
					}
				})
			}
			return
		}
		if errno != 0 {
			p.ioEnd(s, nil, false, fmt.Errorf("write to worker: %w", errno))
			return
		}
		w.woff += n
	}
	w.wtimer.cancel(p)
	w.wtimer = nil
	if err := p.react.watch(w.out, false, w.onReadable); err != nil {
		p.ioEnd(s, nil, true, nil)
	}
}

// replyReady reads what pr's stdout has for the call in flight on s, as
// the reference reads a reply (up to maxReply bytes; bytes after the
// newline in the same read are dropped; a longer line is cut and its rest
// discarded), and ends the call once the reply is complete or stdout has
// ended; it watches stdout again while the reply is not complete.
func (p *Pool) replyReady(s *slot, pr *process) {
	if s.proc == pr && s.life.reapPending && s.cmd.call == nil {
		// The late end of a reaped worker's output, after the owner ended
		// its call (busy timeout).
		p.finishReap(s)
		return
	}
	if s.proc != pr || s.state != Busy || s.cmd.call == nil {
		return // a late readiness: nobody waits for it
	}
	w := &pr.io
	for range maxReplyReads {
		buf := w.buf[:maxReply]
		if w.discard {
			buf = w.buf // maxReply bytes of line, then a scratch area
		}
		m, errno := rawio.ReadFD(w.out, buf[w.got:])
		if errno == syscall.EAGAIN {
			break
		}
		if m > 0 && w.discard {
			if bytes.IndexByte(buf[w.got:w.got+m], '\n') >= 0 {
				p.ioEnd(s, w.buf[:w.got], false, nil)
				return
			}
			continue
		}
		if m > 0 {
			if i := bytes.IndexByte(buf[w.got:w.got+m], '\n'); i >= 0 {
				p.ioEnd(s, w.buf[:w.got+i+1], false, nil)
				return
			}
			w.got += m
			w.discard = w.got == maxReply
			continue
		}
		if errno != 0 || len(buf) > w.got {
			p.ioEnd(s, w.buf[:w.got], true, nil) // EOF or a read error
			return
		}
	}
	// Nothing more now, or a worker pouring out a line without end: the
	// watch is armed again (a level-triggered watch with data waiting
	// fires at the next poll), and the owner serves the others meanwhile.
	if err := p.react.watch(w.out, false, w.onReadable); err != nil {
		p.ioEnd(s, w.buf[:w.got], true, nil)
	}
}

// maxReplyReads bounds the reads of one reply per readiness (replyReady),
// so that a worker writing without end cannot hold the owner.
const maxReplyReads = 8

// ioEnd ends the I/O of the call in flight on s: the reply (copied, so
// that the client owns what it gets), whether stdout ended before a
// newline, or the error writing the command.
func (p *Pool) ioEnd(s *slot, reply []byte, eof bool, writeErr error) {
	p.handleIO(s, append([]byte(nil), reply...), eof, writeErr)
}

// stopIO stops watching pr's pipes for a call the owner ended.
func (p *Pool) stopIO(pr *process) {
	p.react.forget(pr.io.out)
	if !pr.stdinClosed {
		p.react.forget(pr.io.in)
	}
	pr.io.wtimer.cancel(p)
	pr.io.wtimer = nil
}

// reapInFlight is reap finding the worker of a call in flight gone: what
// it wrote before it died is read now if its stdout has ended; else as it
// comes, and after a second the call ends with what was read (a
// grandchild may hold the pipe open).
func (p *Pool) reapInFlight(s *slot) {
	c, pr := s.cmd.call, s.proc
	s.life.reapPending = true
	p.replyReady(s, pr)
	if s.cmd.call != c || s.proc != pr {
		return // ended, and handleIO finished the reap
	}
	p.after(time.Second, func() {
		if s.proc != pr || !s.life.reapPending {
			return // ended, and the reap finished
		}
		p.stopIO(pr)
		if s.cmd.call == c {
			p.ioEnd(s, pr.io.buf[:pr.io.got], true, nil)
			return
		}
		// The owner ended the call meanwhile (busy timeout): nothing waits
		// for the output, the reap can finish.
		p.finishReap(s)
	})
}
