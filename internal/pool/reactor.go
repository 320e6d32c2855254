package pool

import (
	"fmt"
	"sync"
	"syscall"
	"unsafe"

	"sluice/internal/rawio"
)

// reactor is the owner loop's epoll set: the workers' stdin and stdout,
// and the descriptors of a front end serving its clients on the owner
// (Owner.Watch). The owner takes the readiness of all of them from one
// epoll_wait(2) between the messages it handles, as a single-threaded
// multiplexor does, so that a request costs no goroutine switch.
//
// The owner polls the set without waiting (poll) before it waits for its
// next message, whenever a watch is armed. When it has nothing else to
// do, one waiter goroutine parks on the set's descriptor through the
// runtime's poller (an epoll descriptor is readable while it has events)
// and kicks the owner; the owner drains the set and lets the waiter wait
// again. Watches are one-shot (EPOLLONESHOT): a watch fires once per arm.
//
// Everything but the waiter's wait is the owner goroutine's.
type reactor struct {
	ep *rawio.Epoll // on the runtime's poller, for the waiter

	// fds holds, by descriptor number, what the owner does when an armed
	// descriptor is ready (fn, cleared when its watch fires) and whether
	// it is registered with ep (added: ADD done, MOD arms again). A slice,
	// not a map: descriptor numbers are small and dense, and the lookup
	// is made for every event. A handler must tolerate a spurious call (a
	// descriptor closed and reused between an epoll_wait and the
	// handler): it reads, and re-arms on EAGAIN.
	fds  []watchSlot
	armN int // watches armed
	evs  []syscall.EpollEvent

	kick  chan struct{} // waiter -> owner: the set has events (capacity 1)
	again chan struct{} // owner -> waiter: drained, wait again (capacity 1)
	stop  chan struct{} // closed by close: the waiter returns
	wg    sync.WaitGroup
}

// reactorBatch is how many events one epoll_wait takes, and pollRounds
// how many times poll calls it at most before the owner goes back to its
// messages.
const (
	reactorBatch = 64
	pollRounds   = 4
)

func newReactor() (*reactor, error) {
	ep, err := rawio.NewEpoll("pool")
	if err != nil {
		return nil, err
	}
	return &reactor{
		ep:    ep,
		evs:   make([]syscall.EpollEvent, reactorBatch),
		kick:  make(chan struct{}, 1),
		again: make(chan struct{}, 1),
		stop:  make(chan struct{}),
	}, nil
}

// start starts the waiter goroutine; close stops it.
func (r *reactor) start() {
	r.wg.Add(1)
	go r.wait()
}

// wait is the waiter: it parks until the set has events, kicks the owner,
// and waits for the owner to have drained the set before it looks again.
func (r *reactor) wait() {
	defer r.wg.Done()
	for {
		if err := r.ep.Wait(epollReady); err != nil {
			return // closed
		}
		select {
		case r.kick <- struct{}{}:
		default:
		}
		select {
		case <-r.again:
		case <-r.stop:
			return
		}
	}
}

// epollReady reports whether the epoll instance ep has events, without
// taking them (ppoll with a zero timeout).
func epollReady(ep uintptr) bool {
	pfd := struct {
		fd             int32
		events, revent int16
	}{fd: int32(ep), events: 0x1} // POLLIN
	var ts syscall.Timespec
	n, _, e := syscall.RawSyscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	return e == 0 && n > 0
}

// watchSlot is what the reactor knows of one descriptor number.
type watchSlot struct {
	fn    func()
	added bool
}

// slot is fd's watchSlot, the table grown to hold it.
func (r *reactor) slot(fd int) *watchSlot {
	if fd >= len(r.fds) {
		r.fds = append(r.fds, make([]watchSlot, fd+1-len(r.fds)+len(r.fds)/2)...)
	}
	return &r.fds[fd]
}

// watch arms a one-shot watch for fd's readability (or, if out, its
// writability): fn runs on the owner once fd is ready (or has hung up).
func (r *reactor) watch(fd int, out bool, fn func()) error {
	if fd < 0 {
		return fmt.Errorf("pool: watch descriptor %d: %w", fd, syscall.EBADF)
	}
	w := r.slot(fd)
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: int32(fd)}
	if out {
		ev.Events = syscall.EPOLLOUT | syscall.EPOLLONESHOT
	}
	op := syscall.EPOLL_CTL_MOD
	if !w.added {
		op = syscall.EPOLL_CTL_ADD
	}
	if err := r.ep.Ctl(op, fd, &ev); err != nil {
		return fmt.Errorf("pool: watch descriptor %d: %w", fd, err)
	}
	w.added = true
	if w.fn == nil {
		r.armN++
	}
	w.fn = fn
	return nil
}

// forget removes fd from the set; its owner calls it before it closes fd,
// so that a later descriptor with the same number starts afresh.
func (r *reactor) forget(fd int) {
	if fd < 0 || fd >= len(r.fds) || !r.fds[fd].added {
		return
	}
	var ev syscall.EpollEvent
	_ = r.ep.Ctl(syscall.EPOLL_CTL_DEL, fd, &ev)
	if r.fds[fd].fn != nil {
		r.armN--
	}
	r.fds[fd] = watchSlot{}
}

// poll runs the handlers of the watches that have fired, without waiting.
func (r *reactor) poll() {
	for range pollRounds {
		n := r.ep.Poll(r.evs)
		if n == 0 {
			return
		}
		for _, ev := range r.evs[:n] {
			if fd := int(ev.Fd); fd < len(r.fds) {
				if fn := r.fds[fd].fn; fn != nil {
					r.fds[fd].fn = nil
					r.armN--
					fn()
				}
			}
		}
		if n < len(r.evs) {
			return
		}
	}
}

// armed reports whether a watch is armed (the owner then polls between
// its messages).
func (r *reactor) armed() bool { return r.armN > 0 }

// kicked is the owner's answer to a kick: drain the set, then let the
// waiter look again.
func (r *reactor) kicked() {
	r.poll()
	select {
	case r.again <- struct{}{}:
	default:
	}
}

// close stops the waiter and closes the set (owner only, once).
func (r *reactor) close() {
	close(r.stop)
	r.ep.Close() // ends the waiter's Wait
	r.wg.Wait()
}
