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

// acceptor is one listener in the doors' epoll set. Nothing parks on it:
// when the set reports a connection queued, the leader hands the accept
// to a runner of the server (runner.go), which takes every connection
// queued with raw accept4(2) calls, serves the first itself and hands
// each other to another runner. The listener's descriptor is reached
// only through its RawConn.Control, which holds it open for the call, so
// a listener closed meanwhile is an error, never a reused descriptor
// number.
type acceptor struct {
	l   net.Listener
	lrc syscall.RawConn // nil: not a socket of the net package (tests' in-memory listeners), accepted with l.Accept
	s   *Server
	fd  int
	// pending: an accept was handed to a runner that has not begun it (a
	// second event then needs no second runner).
	pending atomic.Bool
	stopped atomic.Bool
	errc    chan error // capacity 1: an accept failed for good; Serve returns it
	laddr   net.Addr   // for unix sockets: the listener's (what getsockname says)
	netw    string
}

// newAcceptor returns the acceptor of l, its descriptor added to the
// server's set. A listener that is not a socket of the net package is
// accepted from with its own Accept, and its connections served as they
// are.
func newAcceptor(l net.Listener, s *Server) (*acceptor, error) {
	a := &acceptor{l: l, s: s, fd: -1, errc: make(chan error, 1)}
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
	a.lrc = lrc // before the set can report the listener
	var aerr error
	if err := lrc.Control(func(fd uintptr) {
		a.fd = int(fd)
		aerr = s.poll.add(a.fd, syscall.EPOLLIN, a)
	}); err != nil {
		return nil, fmt.Errorf("netserve: listener: %w", err)
	}
	if aerr != nil {
		return nil, aerr
	}
	return a, nil
}

// ready is the set's news that a connection is queued: a runner is to
// accept it (in the set's drain: see target).
func (a *acceptor) ready(uint32) {
	if a.stopped.Load() || a.pending.Swap(true) {
		return
	}
	if !a.s.dispatch(work{a: a}, false) {
		a.pending.Store(false)
	}
}

// fail gives Serve an accept error it is to return.
func (a *acceptor) fail(err error) {
	select {
	case a.errc <- err:
	default:
	}
}

// listenerCheck bounds how long Serve takes to notice that its listener
// was closed by other code than the Server (a closed listener leaves the
// set without an event; Serve then returns the error, as for any broken
// listener).
const listenerCheck = time.Second

// checkOpen is the function given to the listener's Control by the
// check: Control fails once the listener is closed.
func checkOpen(uintptr) {}

// errAcceptTemporary marks an accept4 error worth retrying after a pause
// (out of descriptors or memory).
var errAcceptTemporary = errors.New("temporary")

// errNoneQueued is accept4's EAGAIN: every queued connection was taken.
var errNoneQueued = errors.New("no connection queued")

// accept4Call is one runner's accept4(2): its outcome is kept here so
// that the function given to the listener's Control is made once a
// runner.
type accept4Call struct {
	cfd   int
	errno syscall.Errno
	rsa   syscall.RawSockaddrAny
	n     uint32
	try   func(uintptr)
}

// acceptFrom takes every connection queued on a's listener (the set
// reports the listener again only when a new one comes): it returns the
// first, admitted, for the runner to serve, and hands each other to
// another runner. Temporary errors (out of descriptors) back off up to a
// second; any other ends Serve.
func (r *runner) acceptFrom(a *acceptor) *Conn {
	s := r.s
	a.pending.Store(false) // an event from now on needs another runner
	var first *Conn
	var backoff time.Duration
	for !a.stopped.Load() {
		fd, raddr, err := r.accept4(a)
		if err == errNoneQueued {
			break
		}
		if err != nil {
			if !isTemporary(err) || s.closing.Load() {
				a.fail(err)
				break
			}
			backoff = AcceptBackoff(backoff)
			s.o.Logger.Warn(s.o.Name+": accept failed; retrying", "err", err, "in", backoff)
			if !s.pause(backoff) {
				break
			}
			continue
		}
		backoff = 0
		c, err := s.newConn(a, fd, raddr)
		if err != nil {
			rawio.CloseFD(fd)
			if errors.Is(err, errStopped) {
				break
			}
			s.o.Logger.Warn(s.o.Name+": cannot serve an accepted connection; closed it", "err", err)
			continue
		}
		cn, err := s.admit(c)
		if err != nil {
			break
		}
		if cn == nil {
			continue
		}
		if first == nil {
			first = cn
		} else {
			s.start(cn)
		}
	}
	return first
}

// accept4 takes one connection off a's listener: its descriptor and peer
// address, errNoneQueued when none is queued.
func (r *runner) accept4(a *acceptor) (fd int, raddr net.Addr, err error) {
	ac := &r.acc
	if ac.try == nil {
		ac.try = func(lfd uintptr) { ac.cfd, ac.n, ac.errno = rawio.Accept4From(lfd, &ac.rsa) }
	}
	if err := a.lrc.Control(ac.try); err != nil {
		return -1, nil, err
	}
	switch ac.errno {
	case 0:
	case syscall.EAGAIN:
		return -1, nil, errNoneQueued
	default:
		err := error(&net.OpError{Op: "accept", Net: a.netw, Addr: a.l.Addr(), Err: ac.errno})
		switch ac.errno {
		case syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM:
			err = fmt.Errorf("%w (%w)", err, errAcceptTemporary)
		}
		return -1, nil, err
	}
	raddr = sockaddrAddr(&ac.rsa, ac.n)
	if a.netw == "tcp" {
		one := int32(1)
		// As the net package does for every accepted TCP connection.
		syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, uintptr(ac.cfd), syscall.IPPROTO_TCP, syscall.TCP_NODELAY,
			uintptr(unsafe.Pointer(&one)), 4, 0)
	}
	return ac.cfd, raddr, nil
}

// stop ends accepting, then closes the listener: the descriptor leaves
// the set while it is surely open.
func (a *acceptor) stop() {
	if a.stopped.Swap(true) {
		return
	}
	if a.lrc != nil {
		p := a.s.poll
		if err := a.lrc.Control(func(uintptr) { p.remove(a.fd, a, true) }); err != nil {
			// Closed by its owner already: the kernel took it out of the
			// set (or will, with its last descriptor elsewhere), and the
			// number may be another's now: forget it without epoll_ctl.
			p.remove(a.fd, a, false)
		}
	}
	a.l.Close()
}
