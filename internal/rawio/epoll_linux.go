package rawio

import (
	"fmt"
	"os"
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
	fd int
	f  *os.File // fd on the runtime's poller
	rc syscall.RawConn
}

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
	return &Epoll{fd: fd, f: f, rc: rc}, nil
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

// Close closes the set, which ends a Wait.
func (e *Epoll) Close() error { return e.f.Close() }
