package mux

import (
	"syscall"
	"time"
	"unsafe"

	"sluice/internal/pool"
)

// The connections the front holds on the owner between two events: those
// whose line is not in yet (waitingConn), and those whose request is in
// the pool (frontReq). Each kind is a list on the owner, so that stop can
// close them all, and its ended entries are kept for reuse with their
// functions bound once: a connection costs no allocation here.

// waitingConn is an accepted connection whose line is not in yet: its
// descriptor is watched in the owner's epoll set, under a timer.
type waitingConn struct {
	f                    *front
	fd                   int // -1 when not waiting
	since                time.Time
	timer                pool.OwnerTimer
	onReadable, onExpire func()
	prev, next           *waitingConn
}

// await watches fd until its line comes, for the timeout at most.
func (f *front) await(fd int) {
	w := f.waitFree
	if w != nil {
		f.waitFree = w.next
	} else {
		w = &waitingConn{f: f}
		w.onReadable, w.onExpire = w.readable, w.expire
	}
	if err := f.o.Watch(fd, w.onReadable); err != nil {
		w.next, f.waitFree = f.waitFree, w
		f.s.handOff(f.ls, handed{fd: fd})
		return
	}
	w.fd, w.since, w.prev, w.next = fd, time.Now(), nil, f.waiting
	if f.waiting != nil {
		f.waiting.prev = w
	}
	f.waiting = w
	f.o.Arm(&w.timer, f.s.o.Timeout, w.onExpire)
}

// readable reads a waiting connection that has become readable.
func (w *waitingConn) readable() {
	f := w.f
	if f.stopped || w.fd < 0 {
		return
	}
	n, e := rawRW(syscall.SYS_READ, w.fd, f.rb.line[:])
	if e == syscall.EAGAIN && f.o.Watch(w.fd, w.onReadable) == nil {
		return
	}
	fd, spent := w.fd, time.Since(w.since)
	w.release()
	if e == syscall.EAGAIN { // not watched: its goroutine waits on the poller
		f.s.handOff(f.ls, handed{fd: fd, in: inline{spent: spent}})
		return
	}
	f.got(fd, n, e, spent)
}

// expire closes a connection that sent nothing within the timeout,
// without a reply (the reference's behaviour).
func (w *waitingConn) expire() {
	if w.f.stopped || w.fd < 0 {
		return
	}
	fd := w.fd
	w.release()
	closeRaw(fd)
}

// release ends w's wait (its watch and timer go, the connection stays
// open) and keeps w for reuse.
func (w *waitingConn) release() {
	f := w.f
	w.timer.Stop()
	f.o.Forget(w.fd)
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		f.waiting = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	}
	w.fd, w.prev, w.next = -1, nil, f.waitFree
	f.waitFree = w
}

// closeWaiting closes the waiting connections (stop).
func (f *front) closeWaiting(onOwner bool) {
	for w := f.waiting; w != nil; w = w.next {
		if onOwner {
			w.timer.Stop()
			f.o.Forget(w.fd)
		}
		closeRaw(w.fd)
		w.fd = -1
	}
	f.waiting = nil
}

// frontReq is a request the front forwarded: its connection belongs to
// finish, or to stop if stop comes first.
type frontReq struct {
	f          *front
	fd         int // -1 once stop has closed it
	prev, next *frontReq
	done       func(pool.Result) // finish
}

// newReq lists a request for the connection fd.
func (f *front) newReq(fd int) *frontReq {
	r := f.reqFree
	if r != nil {
		f.reqFree = r.next
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
	r.fd, r.prev, r.next = -1, nil, f.reqFree
	f.reqFree = r
	reply, raw := replyOf(res)
	if raw == nil {
		raw = unsafe.Slice(unsafe.StringData(reply), len(reply))
	}
	f.s.write(fd, raw)
}

// closeInflight closes the connections of the requests in the pool
// (stop); their finish then does nothing.
func (f *front) closeInflight() {
	for r := f.inflight; r != nil; r = r.next {
		closeRaw(r.fd)
		r.fd = -1
	}
	f.inflight = nil
}
