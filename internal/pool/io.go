package pool

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// The worker I/O of a request is done by the requester's own goroutine
// (Do), not by the owner: the owner grants it a worker, the client
// writes the command and reads the reply, and reports the outcome to the
// owner in one message. Who does what with a granted call:
//
//   - The owner dispatches the call: the slot goes Busy, the busy timer
//     starts, call.proc is set, and the grant (the process) is sent on
//     call.ch. From then until the call's io state leaves ioRunning, the
//     process's pipes' data (stdin writes, stdout reads, process.buf and
//     process.wbuf) belong to whoever holds the grant; the slot itself
//     stays the owner's and is touched by nobody else.
//   - The holder writes the line and reads one reply line, then claims
//     the call (io: ioRunning -> ioClient). If that succeeds, its result
//     is final; it is computed from the I/O alone (ioResult), exactly as
//     the owner's handleIO computes it. Either way the holder then sends
//     the ioEvent to the owner, which does the bookkeeping (counters,
//     state change, notifications, next queued request) as before. The
//     event is sent before the client returns, so anything the client
//     asks the pool afterwards sees the worker's new state.
//   - The owner may end a call first (busy timeout, kill, shutdown); it
//     claims it (ioRunning or ioAbandoned -> ioOwner), sends the result on
//     call.ch and interrupts the holder's read (a read deadline in the
//     past; stdin is closed by the kill that always follows). The holder's
//     claim then fails: it reports its (late) event and returns the
//     owner's result. Since every owner claim kills the worker, the
//     interrupted pipes are never used again.
//   - A client whose ctx ends (the server closing) must not wait for the
//     worker: the ctx callback marks the call ioAbandoned and interrupts
//     the read; the client hands what it has read so far to a new
//     goroutine, which resumes the read and reports the event as a client
//     would (the result is dropped), and Do returns ErrClosed. The helper
//     clears the deadline and then re-checks the state, and the owner
//     claims before it interrupts, so an owner's interruption is never
//     lost.
//
// Ticks, which have no client, are served by a goroutine per tick.

// I/O states of a granted call (call.io).
const (
	ioRunning   int32 = iota // the grant's holder does the worker I/O
	ioClient                 // the holder finished and its result stands
	ioOwner                  // the owner ended the call and sent its result
	ioAbandoned              // the client left; a helper finishes the I/O
)

// ioProgress is how far a call's worker I/O has got, so that it can be
// resumed by another goroutine.
type ioProgress struct {
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
		if !c.io.CompareAndSwap(ioRunning, ioOwner) && !c.io.CompareAndSwap(ioAbandoned, ioOwner) {
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
// goroutine of its own (owner only).
func (p *Pool) grant(c *call, pr *process) {
	c.proc = pr
	if c.onDone != nil {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			ev, _ := p.workerIO(c, pr, false, nil)
			c.io.CompareAndSwap(ioRunning, ioClient)
			p.send(ev)
		}()
		return
	}
	c.ch <- struct{}{}
}

// ctxWatch interrupts a client's read of its worker's reply when its ctx
// ends. It is armed only when a read would block (most replies are there
// by the time the client reads), and then joins the client to its
// context's watchGroup: one context.AfterFunc per client context (in
// practice one per server), not one per request, which would cost a
// lock, map operations and three allocations each time.
type ctxWatch struct {
	ctx   context.Context
	c     *call
	group *watchGroup // set while armed
	// prev and next link the calls of group.
	prev, next *call
}

// watchGroup is the armed calls of one context.
type watchGroup struct {
	done  <-chan struct{}
	stop  func() bool
	first *call
}

// maxWatchGroups: beyond this many, a group is dropped once it is empty.
const maxWatchGroups = 4

// arm adds w's call to its context's group (grant holder only).
func (p *Pool) arm(w *ctxWatch) {
	done := w.ctx.Done()
	if w.group != nil || done == nil {
		return
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	g := p.groups[done]
	if g == nil {
		g = &watchGroup{done: done}
		if p.groups == nil {
			p.groups = map[<-chan struct{}]*watchGroup{}
		}
		p.groups[done] = g
		g.stop = context.AfterFunc(w.ctx, func() { p.ctxEnded(g) })
	}
	c := w.c
	w.group, w.prev, w.next = g, nil, g.first
	if g.first != nil {
		g.first.watch.prev = c
	}
	g.first = c
}

// disarm takes w's call out of its group again.
func (p *Pool) disarm(w *ctxWatch) {
	g := w.group
	if g == nil {
		return
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if w.prev != nil {
		w.prev.watch.next = w.next
	} else if g.first == w.c {
		g.first = w.next
	}
	if w.next != nil {
		w.next.watch.prev = w.prev
	}
	w.group, w.prev, w.next = nil, nil, nil
	if g.first == nil && len(p.groups) > maxWatchGroups && p.groups[g.done] == g {
		delete(p.groups, g.done)
		g.stop()
	}
}

// ctxEnded interrupts the reads of g's calls: their clients have left.
func (p *Pool) ctxEnded(g *watchGroup) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.groups[g.done] == g {
		delete(p.groups, g.done)
	}
	for c := g.first; c != nil; c = c.watch.next {
		if c.io.CompareAndSwap(ioRunning, ioAbandoned) {
			_ = c.proc.stdout.SetReadDeadline(aLongTimeAgo)
		}
	}
}

// stopWatches unregisters every group (the pool has stopped).
func (p *Pool) stopWatches() {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	for done, g := range p.groups {
		g.stop()
		delete(p.groups, done)
	}
}

// clientIO does c's worker I/O on pr for Do and returns its result.
func (p *Pool) clientIO(ctx context.Context, c *call, pr *process) Result {
	c.watch = ctxWatch{ctx: ctx, c: c}
	ev, cut := p.workerIO(c, pr, true, &c.watch)
	p.disarm(&c.watch)
	if !cut && c.io.Load() == ioAbandoned {
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
	if c.io.CompareAndSwap(ioRunning, ioClient) || c.io.CompareAndSwap(ioAbandoned, ioClient) {
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
	if c.io.Load() == ioAbandoned {
		// An owner's claim from now on interrupts this read.
		ev, _ = p.workerIO(c, pr, false, nil)
	} else {
		// The owner claimed it (its interruption may just have been
		// cleared): report what there is.
		ev = ioEvent{slot: c.slot, proc: pr, reply: bytes.Clone(pr.buf[:c.ior.got]), eof: true}
	}
	c.io.CompareAndSwap(ioAbandoned, ioClient)
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

// workerIO does, or resumes, c's worker I/O on pr: write the line under
// the command timeout, then read one reply line as the reference does (up
// to maxReply bytes; bytes after the newline in the same read are
// dropped; a longer line is cut and its rest discarded). cut is true when
// the read was interrupted for an abandoned call (only when resumable):
// c.ior keeps the progress for finishAbandoned. Any other read error is
// the end of the worker's output. w, if not nil, is armed before a read
// waits.
func (p *Pool) workerIO(c *call, pr *process, resumable bool, w *ctxWatch) (ev ioEvent, cut bool) {
	ev = ioEvent{slot: c.slot, proc: pr}
	st := &c.ior
	if !st.written {
		pr.wbuf = append(append(pr.wbuf[:0], c.req.Line...), '\n')
		if err := pr.writeCmd(p.cfg.CmdTimeout); err != nil {
			ev.writeErr = err
			return ev, false
		}
		st.written = true
	}
	pr.watch, pr.pool = w, p
	for {
		buf := pr.buf[:maxReply]
		if st.discard {
			buf = pr.buf // maxReply bytes of line, then a scratch area
		}
		m, err := pr.readReply(buf[st.got:])
		if m > 0 && st.discard {
			if bytes.IndexByte(buf[st.got:st.got+m], '\n') >= 0 {
				ev.reply = bytes.Clone(buf[:st.got])
				return ev, false
			}
			m = 0
		}
		if m > 0 {
			if i := bytes.IndexByte(buf[st.got:st.got+m], '\n'); i >= 0 {
				ev.reply = bytes.Clone(buf[:st.got+i+1])
				return ev, false
			}
			st.got += m
			if st.got == maxReply {
				st.discard = true
			}
		}
		if err != nil {
			if resumable && errors.Is(err, os.ErrDeadlineExceeded) && c.io.Load() == ioAbandoned {
				return ev, true
			}
			ev.reply = bytes.Clone(buf[:st.got])
			ev.eof = true
			return ev, false
		}
	}
}

// The worker's pipes are read and written with raw system calls under the
// poller (syscall.RawConn), through functions bound once per process, so
// that the common case costs one system call and nothing else (a
// RawSyscall: the pipes are non-blocking, and entersyscall/exitsyscall
// cost more than such a call takes): the
// command timeout's deadline (a time.Now and a runtime timer) is set only
// when a write would block, and the ctx watch is armed only when a read
// would.

// writeCmd writes pr.wbuf to the worker's stdin within timeout of the
// first time the write would block; errors are those of os.File.Write.
func (pr *process) writeCmd(timeout time.Duration) error {
	pr.wleft, pr.werr, pr.wblocked, pr.wtimeout = pr.wbuf, nil, false, timeout
	err := pr.stdinRC.Write(pr.writeFn)
	if pr.wblocked {
		_ = pr.stdin.SetWriteDeadline(time.Time{})
	}
	if err == nil {
		err = pr.werr
	}
	if err != nil {
		return &os.PathError{Op: "write", Path: pr.stdin.Name(), Err: err}
	}
	return nil
}

func (pr *process) writeSome(fd uintptr) bool {
	for len(pr.wleft) > 0 {
		n, _, err := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(pr.wleft))), uintptr(len(pr.wleft)))
		switch err {
		case 0:
			pr.wleft = pr.wleft[n:]
		case syscall.EINTR:
		case syscall.EAGAIN:
			if !pr.wblocked {
				pr.wblocked = true
				_ = pr.stdin.SetWriteDeadline(time.Now().Add(pr.wtimeout))
			}
			return false
		default:
			pr.werr = err
			return true
		}
	}
	return true
}

// readReply reads from the worker's stdout as os.File.Read does (io.EOF
// at the end), arming pr.watch before it waits.
func (pr *process) readReply(b []byte) (int, error) {
	pr.rbuf, pr.rn, pr.rerr, pr.waiting = b, 0, nil, false
	err := pr.stdoutRC.Read(pr.readFn)
	if pr.waiting {
		pr.pool.pollWaiters.Add(-1)
	}
	pr.rbuf = nil
	if err != nil {
		return 0, err
	}
	return pr.rn, pr.rerr
}

func (pr *process) readSome(fd uintptr) bool {
	for {
		n, _, err := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(pr.rbuf))), uintptr(len(pr.rbuf)))
		switch {
		case err == 0 && n == 0 && len(pr.rbuf) > 0:
			pr.rerr = io.EOF
			return true
		case err == 0:
			pr.rn = int(n)
			return true
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			if pr.watch != nil {
				pr.pool.arm(pr.watch)
			}
			if !pr.waiting {
				pr.waiting = true
				pr.pool.pollWaiters.Add(1)
			}
			return false
		default:
			pr.rerr = err
			return true
		}
	}
}
