package mux

import (
	"syscall"
	"time"
	"unsafe"

	"sluice/internal/pool"
	"sluice/internal/rawio"
)

// The connections the front holds on the owner between two events: those
// whose line is not in yet (waitingConn), and those whose request is in
// the pool (frontReq). Each kind is a list on the owner, so that stop can
// close them all, and its ended entries are kept for reuse with their
// functions bound once: a connection costs no allocation here.

// links are an entry's places in its list (or, next only, in its free
// list).
type links[T any] struct{ prev, next *T }

// listed is a pointer to an entry of an owner list.
type listed[T any] interface {
	*T
	links() *links[T]
}

// push puts x first in the list at head.
func push[T any, P listed[T]](head **T, x P) {
	l := x.links()
	l.prev, l.next = nil, *head
	if *head != nil {
		P(*head).links().prev = (*T)(x)
	}
	*head = (*T)(x)
}

// unlink takes x out of the list at head and puts it first in the free
// list.
func unlink[T any, P listed[T]](head, free **T, x P) {
	l := x.links()
	if l.prev != nil {
		P(l.prev).links().next = l.next
	} else {
		*head = l.next
	}
	if l.next != nil {
		P(l.next).links().prev = l.prev
	}
	l.prev, l.next = nil, *free
	*free = (*T)(x)
}

// reuse takes the first entry of the free list, or nil.
func reuse[T any, P listed[T]](free **T) *T {
	x := *free
	if x != nil {
		*free = P(x).links().next
	}
	return x
}

// waitingConn is an accepted connection whose line is not in yet: its
// descriptor is watched in the owner's epoll set, under a timer.
type waitingConn struct {
	f                    *front
	fd                   int // -1 when not waiting
	since                time.Time
	timer                pool.OwnerTimer
	onReadable, onExpire func()
	lk                   links[waitingConn]
}

func (w *waitingConn) links() *links[waitingConn] { return &w.lk }

// await watches fd until its line comes, for the timeout at most.
func (f *front) await(fd int) {
	w := reuse(&f.waitFree)
	if w == nil {
		w = &waitingConn{f: f, fd: -1}
		w.onReadable, w.onExpire = w.readable, w.expire
	}
	if err := f.o.Watch(fd, w.onReadable); err != nil {
		w.lk.next, f.waitFree = f.waitFree, w
		f.handOff(fd, inline{})
		return
	}
	w.fd, w.since = fd, f.o.Now()
	push(&f.waiting, w)
	f.o.Arm(&w.timer, f.s.o.Timeout, w.onExpire)
	traceFront(frontAwait, 0)
}

// readable reads a waiting connection that has become readable.
func (w *waitingConn) readable() {
	f := w.f
	if f.stopped || w.fd < 0 {
		return
	}
	n, e := rawio.ReadFD(w.fd, f.rb.line[:])
	if e == syscall.EAGAIN && f.o.Watch(w.fd, w.onReadable) == nil {
		return
	}
	fd, spent := w.fd, f.o.Now().Sub(w.since)
	w.release()
	if e == syscall.EAGAIN { // not watched: its goroutine waits on the poller
		f.handOff(fd, inline{spent: spent})
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
	f := w.f
	f.s.closeConn(fd, f.privileged)
}

// release ends w's wait (its watch and timer go, the connection stays
// open) and keeps w for reuse.
func (w *waitingConn) release() {
	f := w.f
	w.timer.Stop()
	f.o.Forget(w.fd)
	w.fd = -1
	unlink(&f.waiting, &f.waitFree, w)
}

// closeWaiting closes the waiting connections (stop).
func (f *front) closeWaiting(onOwner bool) {
	for w := f.waiting; w != nil; w = w.lk.next {
		if onOwner {
			w.timer.Stop()
			f.o.Forget(w.fd)
		}
		f.s.closeConn(w.fd, f.privileged)
		w.fd = -1
	}
	f.waiting = nil
}

// frontReq is a request the front forwarded: its connection belongs to
// finish, or to stop if stop comes first.
type frontReq struct {
	f    *front
	fd   int               // -1 once stop has closed it
	done func(pool.Result) // finish
	lk   links[frontReq]
}

func (r *frontReq) links() *links[frontReq] { return &r.lk }

// newReq lists a request for the connection fd.
func (f *front) newReq(fd int) *frontReq {
	r := reuse(&f.reqFree)
	if r == nil {
		r = &frontReq{f: f}
		r.done = r.finish
	}
	r.fd = fd
	push(&f.inflight, r)
	return r
}

// finish answers the request with the pool's result and closes its
// connection, unless stop has closed it.
func (r *frontReq) finish(res pool.Result) {
	f, fd := r.f, r.fd
	if fd < 0 {
		return
	}
	r.fd = -1
	unlink(&f.inflight, &f.reqFree, r)
	reply, raw := replyOf(res)
	if raw == nil {
		raw = unsafe.Slice(unsafe.StringData(reply), len(reply))
	}
	f.s.write(fd, raw, f.privileged)
}

// closeInflight closes the connections of the requests in the pool
// (stop); their finish then does nothing.
func (f *front) closeInflight() {
	for r := f.inflight; r != nil; r = r.lk.next {
		f.s.closeConn(r.fd, f.privileged)
		r.fd = -1
	}
	f.inflight = nil
}
