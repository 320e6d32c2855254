package mux

import (
	"sync"
	"syscall"
	"time"
	"unsafe"

	"sluice/internal/netserve"
	"sluice/internal/pool"
	"sluice/internal/rawio"
)

// The main and restricted sockets are served on the pool's owner
// goroutine, as a single-threaded multiplexor serves everything from one
// epoll loop: their listening descriptors and the connections whose
// request line is not in yet are watched in the owner's epoll set beside
// the workers' pipes (pool.Owner). The owner accepts as soon as a
// connection waits, reads the line when it comes, hands a forwarded
// command to the pool without the inbox, answers a built-in command from
// a snapshot it takes itself, and writes the reply and closes the
// connection when the worker's reply is in. A forwarded request thus
// costs no goroutine switch; an idle connection costs an epoll watch and
// a timer, no goroutine. The restricted socket's front forwards nothing:
// a line that is no built-in command is refused there (ReplyPrivileged).
//
// A connection goes to a connection goroutine (Server.goServe) with what
// was read when its first read brings part of a line, end of file or an
// error, or, on the main socket, a line the owner does not answer itself
// (reread, autoscale, a command no counted kind names, one too long):
// that goroutine's reader is the one framing of every odd case. A
// connection that sends nothing within the timeout is closed without a
// reply, as the reference does.
//
// Close ends the front on the owner: the connections still waiting for
// their line or for the pool see EOF, as with the reference's SIGTERM.

// frontBatch is how many connections the owner accepts per readiness of
// the listening socket before it looks at its other descriptors.
const frontBatch = 64

// frontAccept is rawio.Accept4 (a variable for the tests).
var frontAccept = rawio.Accept4

// frontStep is a step of the front that a test waits for (frontHook).
type frontStep int

const (
	// frontAsked: startFront has asked the owner to take the listener
	// and waits for its answer (or for Close).
	frontAsked frontStep = iota
	// frontAwait: a connection with nothing to read at its accept is
	// watched on the owner until its line comes.
	frontAwait
	// frontHandOff: a connection goes to a connection goroutine.
	frontHandOff
	// frontBackoff: accept failed; the listener is looked at again
	// after the back-off given with the step.
	frontBackoff
)

// frontHook, when set (by the tests only), is told each step as it is
// taken, on the goroutine that takes it (mostly the owner: it must not
// block).
var frontHook func(step frontStep, d time.Duration)

// traceFront tells frontHook of a step.
func traceFront(step frontStep, d time.Duration) {
	if h := frontHook; h != nil {
		h(step, d)
	}
}

// front is a socket served on the owner. Everything but done is the
// owner's (or, once the pool has stopped, stop's caller's).
type front struct {
	s          *Server
	privileged bool // the main socket; false for the restricted one
	lfd        int  // a non-blocking duplicate of the listener's descriptor, closed by stop
	o          *pool.Owner
	rb         reqBuf
	stopped    bool // set by stop: read by the owner's handlers
	stopOnce   sync.Once
	delay      time.Duration // accept's back-off after an error like EMFILE
	retry      pool.OwnerTimer
	done       chan struct{} // closed by stop
	fds        []int         // accept's, reused
	snap       pool.Snapshot // built-in commands' snapshot, reused
	out        []byte        // their reply, reused
	// onAccept and onRetry are accept and rewatch, bound once.
	onAccept, onRetry func()
	// waiting lists the connections whose line is not in yet, inflight
	// the forwarded requests in the pool; the free lists keep ended ones
	// for reuse (frontconns.go).
	waiting, waitFree *waitingConn
	inflight, reqFree *frontReq
}

// startFront serves the listener descriptor lfd of a socket on the
// pool's owner until the server closes; false when the pool has stopped,
// or when the server closes before startFront has learnt whether the
// owner took lfd (the pool may not run yet): f is then stopped after the
// owner's start, whenever the owner comes to it. lfd belongs to f from
// here on.
func (s *Server) startFront(lfd int, privileged bool) (*front, bool) {
	f := &front{s: s, privileged: privileged, lfd: lfd, done: make(chan struct{})}
	f.onAccept, f.onRetry = f.accept, f.rewatch
	ok := make(chan bool, 1)
	if !s.o.Pool.OnOwner(func(o *pool.Owner) {
		f.o = o
		if s.isClosed() || s.draining.Load() || o.Watch(lfd, f.onAccept) != nil {
			f.stop(true)
			ok <- false
			return
		}
		ok <- true
	}, func() { f.stop(false); ok <- false }) {
		f.stop(false)
		return nil, false
	}
	traceFront(frontAsked, 0)
	select {
	case taken := <-ok:
		return f, taken
	case <-s.ctx.Done():
		f.halt()
		return nil, false
	}
}

// halt has f stopped: by the owner, after what it was asked before, or at
// once if the owner loop has ended.
func (f *front) halt() {
	if !f.s.o.Pool.OnOwner(func(*pool.Owner) { f.stop(true) }, func() { f.stop(false) }) {
		f.stop(false)
	}
}

// stop closes the listener's duplicate, the waiting connections and
// those of the requests still in the pool; on the owner, or anywhere
// once the pool's owner loop has ended (o is then not used: the pool's
// epoll set and timers are gone with it). Only its first call does
// anything; once the owner loop has ended, two may race (a dropped
// message's and halt's).
func (f *front) stop(onOwner bool) {
	f.stopOnce.Do(func() {
		f.stopped = true
		if onOwner && f.lfd >= 0 {
			f.o.Forget(f.lfd)
			f.retry.Stop()
		}
		rawio.CloseFD(f.lfd)
		f.closeWaiting(onOwner)
		f.closeInflight()
		close(f.done)
	})
}

// wait stops f once the server closes or the pool stops, and returns
// when it is stopped.
func (f *front) wait() {
	select {
	case <-f.s.ctx.Done():
	case <-f.s.o.Pool.Done():
	}
	f.halt()
	<-f.done
}

// accept empties the listen queue (frontBatch connections at most), then
// reads each connection taken, and watches the listener again. Taking
// them all before answering any keeps the clients fair: answering one
// between two accepts lets its client connect again at once, into the
// place the next accept freed, while the clients blocked in connect(2)
// for that place wake to a full queue and wait again at the back.
func (f *front) accept() {
	if f.stopped || f.lfd < 0 {
		return
	}
	fds, backoff := f.fds[:0], false
	for range frontBatch {
		fd, e := frontAccept(uintptr(f.lfd))
		if e == syscall.EAGAIN {
			break
		}
		if e != 0 {
			// EMFILE and the like: look again after a back-off.
			f.delay = netserve.AcceptBackoff(f.delay)
			backoff = true
			break
		}
		f.delay = 0
		if !f.s.admit(f.privileged) {
			rawio.CloseFD(fd)
			continue
		}
		fds = append(fds, fd)
	}
	for _, fd := range fds {
		f.first(fd)
	}
	f.fds = fds
	if backoff {
		f.o.Arm(&f.retry, f.delay, f.onRetry)
		traceFront(frontBackoff, f.delay)
		return
	}
	f.rewatch()
}

// rewatch arms the listener's watch again.
func (f *front) rewatch() {
	if !f.stopped && f.lfd >= 0 {
		_ = f.o.Watch(f.lfd, f.onAccept)
	}
}

// first reads a new connection's request: answered at once, left waiting
// for its line, or handed off.
func (f *front) first(fd int) {
	n, e := rawio.ReadFD(fd, f.rb.line[:])
	if e == syscall.EAGAIN {
		f.await(fd)
		return
	}
	f.got(fd, n, e, 0)
}

// got takes the result of a connection's read (n bytes into f.rb, or the
// error e), spent after the accept: a whole line is answered, anything
// else goes to a connection goroutine (with what is left of the timeout),
// which meets EOF or the error again, or reads the rest.
func (f *front) got(fd, n int, e syscall.Errno, spent time.Duration) {
	line, in, whole := firstRead(&f.rb, n, e, spent)
	if !whole {
		f.handOff(fd, in)
		return
	}
	if f.privileged && forwardsAtOnce(line) {
		r := f.newReq(fd)
		f.o.Submit(pool.Request{Line: line, Queue: true}, r.done)
		return
	}
	a, ok := f.s.lookupBuiltin(line, f.privileged)
	switch {
	case ok && a.view == nil:
		f.write(fd, a.reply)
	case ok:
		f.o.SnapshotInto(&f.snap, a.qs)
		f.out = a.view(f.out[:0], &f.snap)
		f.s.write(fd, f.out, f.privileged)
	case !f.privileged:
		f.write(fd, ReplyPrivileged)
	default:
		f.handOff(fd, inline{line: line, whole: true})
	}
}

// write writes the reply to the connection fd and closes it.
func (f *front) write(fd int, reply string) {
	f.s.write(fd, unsafe.Slice(unsafe.StringData(reply), len(reply)), f.privileged)
}

// handOff gives the connection fd to a connection goroutine.
func (f *front) handOff(fd int, in inline) {
	traceFront(frontHandOff, 0)
	f.s.goServe(fd, f.privileged, in)
}

// forwardsAtOnce reports whether line, read whole on the main socket, is
// one of the commands the front forwards itself: the four kinds the pool
// counts (none is a built-in command: TestForwardedKindsAreNotBuiltin),
// short enough for a worker.
func forwardsAtOnce(line string) bool {
	return pool.KindOf(line) != pool.Other && len(line) <= maxCommand
}
