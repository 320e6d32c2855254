package netserve

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"sluice/internal/rawio"
)

// acceptor takes connections off one listener with raw accept4(2) calls.
// The listener's descriptor is in the doors' epoll set; an accept that
// finds nobody parks until the set says a connection is queued. It
// reaches the descriptor only through the listener's RawConn.Control,
// which holds it open for the call, so a listener closed meanwhile is an
// error, never a reused descriptor number.
type acceptor struct {
	l     net.Listener
	lrc   syscall.RawConn // nil: not a socket of the net package (tests' in-memory listeners), accepted with l.Accept
	p     *poller
	fd    int
	ch    chan struct{} // capacity 1: a connection is queued, or stop
	check *time.Timer   // wakes a parked accept to look whether the listener was closed
	// checking: check is armed (only accept touches it)
	checking bool
	slot     waitSlot // a parked accept out of the poller's busy count
	stopped  atomic.Bool
	laddr    net.Addr // for unix sockets: the listener's (what getsockname says)
	netw     string
	// one accept4's outcome, kept here so the function given to Control
	// is made once
	cfd   int
	errno syscall.Errno
	rsa   syscall.RawSockaddrAny
	n     uint32
	try   func(uintptr)
}

// newAcceptor returns the acceptor of l, its descriptor added to p. A
// listener that is not a socket of the net package is accepted from with
// its own Accept, and its connections served as they are.
func newAcceptor(l net.Listener, p *poller) (*acceptor, error) {
	a := &acceptor{l: l, p: p, fd: -1, ch: make(chan struct{}, 1), check: time.NewTimer(time.Hour)}
	a.slot.busy = &p.busy
	a.check.Stop()
	sc, ok := l.(syscall.Conn)
	if !ok {
		return a, nil
	}
	switch ad := l.Addr().(type) {
	case *net.UnixAddr:
		a.netw, a.laddr = "unix", ad
	case *net.TCPAddr:
		a.netw = "tcp"
	default:
		return nil, fmt.Errorf("netserve: a listener on %s is neither unix nor TCP", l.Addr().Network())
	}
	lrc, err := sc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("netserve: listener: %w", err)
	}
	var aerr error
	if err := lrc.Control(func(fd uintptr) {
		a.fd = int(fd)
		aerr = p.add(a.fd, syscall.EPOLLIN, a)
	}); err != nil {
		return nil, fmt.Errorf("netserve: listener: %w", err)
	}
	if aerr != nil {
		return nil, aerr
	}
	a.lrc = lrc
	a.try = func(lfd uintptr) { a.cfd, a.n, a.errno = rawio.Accept4From(lfd, &a.rsa) }
	return a, nil
}

// ready is the set's news that a connection is queued.
func (a *acceptor) ready(uint32) {
	a.slot.leave()
	select {
	case a.ch <- struct{}{}:
	default:
	}
}

// listenerCheck bounds how long a parked accept takes to notice that its
// listener was closed by other code than the Server (Serve then returns
// the error, as for any broken listener).
const listenerCheck = time.Second

// errAcceptTemporary marks an accept4 error worth retrying after a pause
// (out of descriptors or memory).
var errAcceptTemporary = errors.New("temporary")

// accept returns the next connection's descriptor and peer address; an
// error once the acceptor is stopped or the listener closed.
func (a *acceptor) accept() (fd int, raddr net.Addr, err error) {
	for {
		if a.stopped.Load() {
			a.check.Stop() // stop may have stopped it before the last park armed it
			return -1, nil, errStopped
		}
		if err := a.lrc.Control(a.try); err != nil {
			return -1, nil, err
		}
		if a.errno == syscall.EAGAIN {
			// A listener its owner closes (not through the Server) leaves
			// the set without an event: look again within listenerCheck.
			// The timer stays armed across parks until it fires: a
			// connection's accept costs no timer change.
			if !a.checking {
				a.check.Reset(listenerCheck)
				a.checking = true
			}
			a.slot.enter()
			select {
			case <-a.ch:
			case <-a.check.C:
				a.checking = false
			}
			a.slot.leave()
			continue
		}
		if a.errno != 0 {
			err := error(&net.OpError{Op: "accept", Net: a.netw, Addr: a.l.Addr(), Err: a.errno})
			switch a.errno {
			case syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM:
				err = fmt.Errorf("%w (%w)", err, errAcceptTemporary)
			}
			return -1, nil, err
		}
		break
	}
	raddr = sockaddrAddr(&a.rsa, a.n)
	if a.netw == "tcp" {
		one := int32(1)
		// As the net package does for every accepted TCP connection.
		syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, uintptr(a.cfd), syscall.IPPROTO_TCP, syscall.TCP_NODELAY,
			uintptr(unsafe.Pointer(&one)), 4, 0)
	}
	return a.cfd, raddr, nil
}

// stop ends accept, then closes the listener: the descriptor leaves the
// set while it is surely open, and a parked accept wakes and returns.
func (a *acceptor) stop() {
	if a.stopped.Swap(true) {
		return
	}
	if a.lrc != nil {
		if err := a.lrc.Control(func(uintptr) { a.p.remove(a.fd, a, true) }); err != nil {
			// Closed by its owner already: the kernel took it out of the
			// set (or will, with its last descriptor elsewhere), and the
			// number may be another's now: forget it without epoll_ctl.
			a.p.remove(a.fd, a, false)
		}
	}
	a.l.Close()
	a.ready(0)
	a.check.Stop()
}
