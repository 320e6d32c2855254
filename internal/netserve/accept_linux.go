package netserve

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// acceptor takes connections off one listener with raw accept4(2) calls
// on a duplicate of its descriptor, which it waits on in the runtime's
// poller (a listener of the net package offers no such wait: its
// RawConn's Read is EINVAL). Closing the acceptor closes the duplicate:
// the socket stops listening when the listener is closed too.
type acceptor struct {
	l     net.Listener
	f     *os.File // the duplicate, on the runtime's poller
	rc    syscall.RawConn
	laddr net.Addr // for unix sockets: the listener's (what getsockname says)
	netw  string
	// one accept4's outcome, kept here so the function given to rc.Read
	// is made once
	fd    int
	errno syscall.Errno
	rsa   syscall.RawSockaddrAny
	n     uint32
	fn    func(uintptr) bool
}

// newAcceptor returns the acceptor of l. A listener that is not a socket
// of the net package (an in-memory one, in tests) is accepted from with
// its own Accept, and its connections served as they are.
func newAcceptor(l net.Listener) (*acceptor, error) {
	sc, ok := l.(syscall.Conn)
	if !ok {
		return &acceptor{l: l}, nil
	}
	lrc, err := sc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("netserve: listener: %w", err)
	}
	dup, errno := -1, syscall.Errno(0)
	if err := lrc.Control(func(fd uintptr) {
		r, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, fd, syscall.F_DUPFD_CLOEXEC, 0)
		dup, errno = int(r), e
	}); err != nil {
		return nil, fmt.Errorf("netserve: listener: %w", err)
	}
	if errno != 0 {
		return nil, fmt.Errorf("netserve: listener: duplicating its descriptor: %w", errno)
	}
	f := os.NewFile(uintptr(dup), "listener")
	if err := f.SetReadDeadline(time.Time{}); err != nil { // not on the poller: no wait possible
		f.Close()
		return nil, fmt.Errorf("netserve: listener not on the runtime's poller: %w", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("netserve: listener: %w", err)
	}
	a := &acceptor{l: l, f: f, rc: rc}
	switch ad := l.Addr().(type) {
	case *net.UnixAddr:
		a.netw, a.laddr = "unix", ad
	case *net.TCPAddr:
		a.netw = "tcp"
	default:
		f.Close()
		return nil, fmt.Errorf("netserve: a listener on %s is neither unix nor TCP", l.Addr().Network())
	}
	a.fn = a.try
	return a, nil
}

func (a *acceptor) try(lfd uintptr) bool {
	for {
		a.n = uint32(unsafe.Sizeof(a.rsa))
		r, _, e := syscall.RawSyscall6(syscall.SYS_ACCEPT4, lfd, uintptr(unsafe.Pointer(&a.rsa)), uintptr(unsafe.Pointer(&a.n)),
			syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0, 0)
		switch e {
		case syscall.EINTR, syscall.ECONNABORTED:
			continue
		case syscall.EAGAIN:
			return false
		}
		a.fd, a.errno = int(r), e
		return true
	}
}

// errAcceptTemporary marks an accept4 error worth retrying after a pause
// (out of descriptors or memory).
var errAcceptTemporary = errors.New("temporary")

// accept returns the next connection's descriptor and addresses; an error
// once the listener is closed.
func (a *acceptor) accept() (fd int, raddr net.Addr, err error) {
	if err := a.rc.Read(a.fn); err != nil {
		return -1, nil, err
	}
	if a.errno != 0 {
		err := error(&net.OpError{Op: "accept", Net: a.netw, Addr: a.l.Addr(), Err: a.errno})
		switch a.errno {
		case syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM:
			err = fmt.Errorf("%w (%w)", err, errAcceptTemporary)
		}
		return -1, nil, err
	}
	raddr = sockaddrAddr(&a.rsa, a.n)
	if a.netw == "tcp" {
		one := int32(1)
		// As the net package does for every accepted TCP connection.
		syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, uintptr(a.fd), syscall.IPPROTO_TCP, syscall.TCP_NODELAY,
			uintptr(unsafe.Pointer(&one)), 4, 0)
	}
	return a.fd, raddr, nil
}

// close stops accept: it closes the duplicate (the listener is its
// owner's to close).
func (a *acceptor) close() {
	if a.f != nil {
		a.f.Close()
	}
}

// closeFD closes a descriptor accept returned that no connection took.
func closeFD(fd int) { syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0) }
