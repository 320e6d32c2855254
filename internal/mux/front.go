package mux

import (
	"syscall"
	"time"
	"unsafe"

	"sluice/internal/pool"
)

// The main socket is served on the pool's owner goroutine, as a
// single-threaded multiplexor serves everything from one epoll loop: its
// listening descriptor and the connections whose request line is not in
// yet are watched in the owner's epoll set beside the workers' stdout
// (pool.Owner). The owner accepts as soon as its set says a connection
// waits, reads the line when it comes, hands a forwarded command to the
// pool without the inbox, and writes the reply and closes the connection
// when the worker's reply is in (forward.go). A goroutine accepting on
// the runtime's poller accepted later: it runs only when the runtime
// looks at its poller, and under load the listen queue (the reference's
// backlog of 5) was full two thirds of the time, where the floor's was a
// quarter; each client that then blocks in connect costs a wakeup at the
// next accept (docs/mux.md, "Accepting on the owner").
//
// A connection goes to a connection goroutine with what was read
// (handOff) when its first read brings part of a line, end of file or an
// error, or a line that is not answered at once: the goroutine's reader
// is the one framing of every odd case. A connection that sends nothing
// within the timeout is closed without a reply, as the reference does.

// frontBatch is how many connections the owner accepts per readiness of
// the listening socket before it looks at its other descriptors.
const frontBatch = 64

// frontAccept is accept4 (a variable for the tests).
var frontAccept = accept4

// front is the main socket served on the owner. Everything but done is
// the owner's (or, once the pool has stopped, stop's caller's).
type front struct {
	s       *Server
	ls      *listenerState
	lfd     int // a non-blocking duplicate of the listener's descriptor, closed by stop
	o       *pool.Owner
	rb      reqBuf
	waiting map[int]*waitingConn
	stopped bool
	delay   time.Duration // accept's back-off after an error like EMFILE
	done    chan struct{} // closed by stop
	fds     []int         // accept's, reused
	snap    pool.Snapshot // built-in commands' snapshot, reused
	out     []byte        // their reply, reused
	// inflight lists the forwarded requests in the pool, free the ended
	// ones kept for reuse.
	inflight, free *frontReq
}

// frontReq is a request the front forwarded: its connection belongs to
// finish, or to stop if stop comes first. Ended requests are reused with
// their done bound once, so that forwarding allocates nothing here.
type frontReq struct {
	f          *front
	fd         int // -1 once stop has closed it
	prev, next *frontReq
	done       func(pool.Result) // finish
}

// newReq lists a request for the connection fd.
func (f *front) newReq(fd int) *frontReq {
	r := f.free
	if r != nil {
		f.free = r.next
	} else {
		r = &frontReq{f: f}
		r.done = r.finish
	}
	r.fd, r.prev, r.next = fd, nil, f.inflight
	if f.inflight != nil {
		f.inflight.prev = r
	}
	f.inflight = r
	return r
}

// finish answers the request with the pool's result and closes its
// connection, unless stop has closed it.
func (r *frontReq) finish(res pool.Result) {
	f, fd := r.f, r.fd
	if fd < 0 {
		return
	}
	if r.prev != nil {
		r.prev.next = r.next
	} else {
		f.inflight = r.next
	}
	if r.next != nil {
		r.next.prev = r.prev
	}
	r.fd, r.prev, r.next = -1, nil, f.free
	f.free = r
	reply, raw := replyOf(res)
	if raw == nil {
		raw = unsafe.Slice(unsafe.StringData(reply), len(reply))
	}
	f.s.write(fd, raw)
}

// waitingConn is an accepted connection whose line is not in yet.
type waitingConn struct {
	fd    int
	timer *pool.OwnerTimer
}

// startFront serves the listener descriptor lfd of the main socket on the
// pool's owner until the server closes; false (lfd closed) when the pool
// cannot: it has stopped, or has no epoll set of its own. It returns once
// the owner has taken lfd, or has not.
func (s *Server) startFront(ls *listenerState, lfd int) (*front, bool) {
	f := &front{s: s, ls: ls, lfd: lfd, waiting: map[int]*waitingConn{}, done: make(chan struct{})}
	ok := make(chan bool, 1)
	if !s.o.Pool.OnOwner(func(o *pool.Owner) {
		f.o = o
		ok <- o.Watch(lfd, f.accept) == nil
	}, func() { ok <- false }) {
		ok <- false
	}
	if !<-ok {
		closeRaw(lfd)
		return nil, false
	}
	return f, true
}

// stop closes the listener's duplicate and the waiting connections; on
// the owner, or anywhere once the pool has stopped (o is then not used:
// the pool's epoll set is gone with it).
func (f *front) stop(onOwner bool) {
	if f.stopped {
		return
	}
	f.stopped = true
	if onOwner {
		f.o.Forget(f.lfd)
	}
	closeRaw(f.lfd)
	for fd, w := range f.waiting {
		if onOwner {
			w.timer.Stop()
			f.o.Forget(fd)
		}
		closeRaw(fd)
		f.s.connDone(true)
	}
	clear(f.waiting)
	for r := f.inflight; r != nil; r = r.next {
		closeRaw(r.fd)
		r.fd = -1
	}
	f.inflight = nil
	close(f.done)
}

// wait stops f once the server closes or the pool stops, and returns
// when it is stopped: true if the server has closed.
func (f *front) wait() (closed bool) {
	select {
	case <-f.s.ctx.Done():
	case <-f.s.o.Pool.Done():
	}
	if !f.s.o.Pool.OnOwner(func(*pool.Owner) { f.stop(true) }, func() { f.stop(false) }) {
		f.stop(false)
	}
	<-f.done
	return f.s.ctx.Err() != nil
}

// accept empties the listen queue (frontBatch connections at most), then
// reads each connection taken, and watches the listener again. Taking
// them all before answering any is what the floor does: answering one
// between two accepts lets its client connect again at once, into the
// place the next accept freed, while the clients blocked in connect(2)
// for that place wake to a full queue and wait again at the back (status
// p99 under 64 clients 6.8-8.7 ms against 4.5-5.7 ms this way).
func (f *front) accept() {
	if f.stopped {
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
			f.delay = min(max(2*f.delay, 5*time.Millisecond), time.Second)
			backoff = true
			break
		}
		f.delay = 0
		if !f.s.admit(true) {
			closeRaw(fd)
			continue
		}
		fds = append(fds, fd)
	}
	for _, fd := range fds {
		f.first(fd)
	}
	f.fds = fds
	if backoff {
		f.o.After(f.delay, f.rewatch)
		return
	}
	f.rewatch()
}

// rewatch arms the listener's watch again.
func (f *front) rewatch() {
	if !f.stopped {
		_ = f.o.Watch(f.lfd, f.accept)
	}
}

// first reads a new connection's request: answered at once, left waiting
// for its line, or handed off.
func (f *front) first(fd int) {
	n, e := rawRW(syscall.SYS_READ, fd, f.rb.line[:])
	if e == syscall.EAGAIN {
		f.await(fd)
		return
	}
	f.got(fd, n, e)
}

// got takes the result of a connection's read (n bytes into f.rb, or the
// error e): a whole line is answered, anything else goes to a connection
// goroutine, which meets EOF or the error again, or reads the rest.
func (f *front) got(fd, n int, e syscall.Errno) {
	if e != 0 || n == 0 {
		f.s.handOff(f.ls, handed{fd: fd})
		return
	}
	i := indexNL(f.rb.line[:n])
	if i < 0 {
		f.s.handOff(f.ls, handed{fd: fd, in: inline{pre: append([]byte(nil), f.rb.line[:n]...)}})
		return
	}
	line := frameLine(f.rb.line[:i+1])
	if forwardsAtOnce(line) {
		f.s.inlined.Add(1)
		r := f.newReq(fd)
		f.o.Submit(pool.Request{Line: line, Queue: true}, r.done)
		return
	}
	if a, ok := f.s.lookupBuiltin(line, true); ok {
		f.s.inlined.Add(1)
		if a.view == nil {
			f.s.write(fd, unsafe.Slice(unsafe.StringData(a.reply), len(a.reply)))
			return
		}
		f.o.SnapshotInto(&f.snap, a.qs)
		f.out = a.view(f.out[:0], &f.snap)
		f.s.write(fd, f.out)
		return
	}
	f.s.handOff(f.ls, handed{fd: fd, in: inline{line: line, whole: true}})
}

// await watches fd until its line comes, for the timeout at most.
func (f *front) await(fd int) {
	w := &waitingConn{fd: fd}
	if err := f.o.Watch(fd, func() { f.readable(w) }); err != nil {
		f.s.handOff(f.ls, handed{fd: fd})
		return
	}
	w.timer = f.o.After(f.s.o.Timeout, func() { f.expire(w) })
	f.waiting[fd] = w
}

// readable reads a waiting connection that has become readable.
func (f *front) readable(w *waitingConn) {
	if f.stopped || f.waiting[w.fd] != w {
		return
	}
	n, e := rawRW(syscall.SYS_READ, w.fd, f.rb.line[:])
	if e == syscall.EAGAIN && f.o.Watch(w.fd, func() { f.readable(w) }) == nil {
		return
	}
	f.release(w)
	if e == syscall.EAGAIN { // not watched: its goroutine waits on the poller
		f.s.handOff(f.ls, handed{fd: w.fd})
		return
	}
	f.got(w.fd, n, e)
}

// expire closes a connection that sent nothing within the timeout,
// without a reply (the reference's behaviour).
func (f *front) expire(w *waitingConn) {
	if f.stopped || f.waiting[w.fd] != w {
		return
	}
	f.release(w)
	closeRaw(w.fd)
	f.s.connDone(true)
}

// release ends w's wait: its watch and timer go, the connection stays
// open.
func (f *front) release(w *waitingConn) {
	w.timer.Stop()
	f.o.Forget(w.fd)
	delete(f.waiting, w.fd)
}
