package rawio

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Epoll is an epoll instance parked on the runtime's poller: its own
// descriptors are waited on with raw epoll_ctl(2) and epoll_pwait(2)
// calls, and a goroutine that has nothing to do waits for the set itself
// (an epoll descriptor is readable while it holds events) in the
// runtime's poller, like any socket. It is the one way sluice's own event
// loops (internal/netserve's poller, internal/pool's reactor) wait.
type Epoll struct {
	fd     int
	f      *os.File // fd on the runtime's poller
	rc     syscall.RawConn
	closed atomic.Bool

	// One WaitFor's arguments and outcome, kept here so that the function
	// given to Control is made once.
	wevs   []syscall.EpollEvent
	wmsec  int
	wn     int
	werrno syscall.Errno
	wait   func(fd uintptr)
}

// open counts the sets made and not closed (Sets).
var open atomic.Int32

// Sets returns how many Epoll sets are open in the process: a loop that
// waits in a raw system call (WaitFor) holds its thread, and a second set
// parked on the runtime's poller would go unwatched while it does.
func Sets() int { return int(open.Load()) }

// NewEpoll makes an epoll instance on the runtime's poller; name names
// it in errors.
func NewEpoll(name string) (*Epoll, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("%s: epoll_create1: %w", name, err)
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("%s: epoll descriptor non-blocking: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	// A descriptor the runtime's poller did not take has no deadlines:
	// nothing could wait on it, and the loop would sleep with its events.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: epoll descriptor on the runtime's poller: %w", name, err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: epoll descriptor on the runtime's poller: %w", name, err)
	}
	e := &Epoll{fd: fd, f: f, rc: rc}
	e.wait = func(fd uintptr) {
		n, _, errno := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, fd,
			uintptr(unsafe.Pointer(unsafe.SliceData(e.wevs))), uintptr(len(e.wevs)), uintptr(e.wmsec), 0, 0)
		e.wn, e.werrno = int(n), errno
	}
	open.Add(1)
	return e, nil
}

// Ctl is epoll_ctl(2), which cannot block: a raw system call.
func (e *Epoll) Ctl(op, fd int, ev *syscall.EpollEvent) error {
	_, _, errno := syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(e.fd), uintptr(op), uintptr(fd), uintptr(unsafe.Pointer(ev)), 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// Poll takes the events ready now into evs, without waiting
// (epoll_pwait(2) with a zero timeout, retried on EINTR), and returns how
// many it took.
func (e *Epoll) Poll(evs []syscall.EpollEvent) int {
	for {
		n, _, errno := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(e.fd),
			uintptr(unsafe.Pointer(unsafe.SliceData(evs))), uintptr(len(evs)), 0, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return 0
		}
		return int(n)
	}
}

// Wait parks the calling goroutine in the runtime's poller until the set
// has events, then calls ready with the set's descriptor; while ready
// returns false it parks again (the set is edge-triggered on the runtime's
// poller: events that came after ready last looked are reported again).
// It returns once Close is called.
func (e *Epoll) Wait(ready func(fd uintptr) bool) error { return e.rc.Read(ready) }

// WaitFor takes the set's events into evs, waiting for them at most msec
// milliseconds in epoll_pwait(2) as a raw system call: the calling
// goroutine keeps its thread and its processor while it waits, so
// nothing else runs on that processor until an event, the timeout or a
// signal (the runtime's preemption of a goroutine that runs too long
// among them: the call then returns syscall.EINTR) ends the wait. It
// holds the set's descriptor open meanwhile: a Close waits for it. It
// returns how many events it took, 0 at the timeout. One goroutine calls
// it at a time (the set's owner keeps it so: netserve's waiter, or a
// session's call in its place): its arguments are kept in the Epoll.
func (e *Epoll) WaitFor(evs []syscall.EpollEvent, msec int) (int, error) {
	e.wevs, e.wmsec = evs, msec
	if err := e.rc.Control(e.wait); err != nil {
		return 0, err
	}
	e.wevs = nil
	if e.werrno != 0 {
		return 0, e.werrno
	}
	return e.wn, nil
}

// Close closes the set, which ends a Wait (and, once it returns, a
// WaitFor's wait).
func (e *Epoll) Close() error {
	if !e.closed.Swap(true) {
		open.Add(-1)
	}
	return e.f.Close()
}
