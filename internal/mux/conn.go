package mux

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// The milter opens a new connection for every request, so the per
// connection cost of net.Listener.Accept and net.Conn counts: an accept
// there is accept4 plus getsockname, two epoll_ctl calls (register and
// unregister with the netpoller) and half a dozen allocations, and the
// first read of a connection usually finds the request already there.
// So Serve (or the pool's owner, front.go) accepts with accept4 itself
// (no addresses asked for) and a
// connection starts as a bare non-blocking descriptor (fdConn): reads and
// writes that complete at once are single system calls, and only one that
// would block registers the descriptor with the runtime's poller (as an
// *os.File), from where deadlines and Server.Close work as for any file.
// The system calls on bare descriptors are raw (rawRW), and connection
// goroutines outlive their connections (Serve).

// fdConn is one accepted connection, used by its connection goroutine
// only, except for f, which Server.Close may close (under Server.mu). A
// connection goroutine reuses its fdConn for every connection it serves.
type fdConn struct {
	fd int
	// f is the descriptor registered with the poller, once an operation
	// would have blocked; from then on every operation goes through it.
	f *os.File
	// rto and wto are the read and write timeouts. A deadline costs a
	// time.Now and, once registered, a runtime timer, and most connections
	// never wait: the deadline is set only when an operation would block
	// (in poll, or on f directly once registered), so a client still has
	// the timeout from its first wait on.
	rto, wto time.Duration
	s        *Server
}

// errConnClosed: Server.Close came before the connection needed the
// poller.
var errConnClosed = errors.New("mux: connection closed")

// poll registers c with the poller, and with the server so that Close
// closes it; false when the server is closing (the descriptor is then
// closed).
func (c *fdConn) poll() bool {
	if c.f != nil {
		return true
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		syscall.Close(c.fd)
		c.fd = -1
		return false
	}
	c.f = os.NewFile(uintptr(c.fd), "mux-client")
	s.files[c.f] = struct{}{}
	now := time.Now()
	if c.rto > 0 {
		_ = c.f.SetReadDeadline(now.Add(c.rto))
	}
	if c.wto > 0 {
		_ = c.f.SetWriteDeadline(now.Add(c.wto))
	}
	return true
}

func (c *fdConn) setReadTimeout(d time.Duration) {
	if c.f != nil {
		_ = c.f.SetReadDeadline(time.Now().Add(d))
		return
	}
	c.rto = d
}

func (c *fdConn) setWriteTimeout(d time.Duration) {
	if c.f != nil {
		_ = c.f.SetWriteDeadline(time.Now().Add(d))
		return
	}
	c.wto = d
}

func (c *fdConn) Read(b []byte) (int, error) {
	if c.f == nil {
		n, err := rawRW(syscall.SYS_READ, c.fd, b)
		switch {
		case err == 0 && n == 0 && len(b) > 0:
			return 0, io.EOF
		case err == 0:
			return n, nil
		case err != syscall.EAGAIN:
			return 0, err
		}
		if !c.poll() {
			return 0, errConnClosed
		}
	}
	return c.f.Read(b)
}

func (c *fdConn) Write(b []byte) (int, error) {
	done := 0
	if c.f == nil {
		for done < len(b) {
			n, err := rawRW(syscall.SYS_WRITE, c.fd, b[done:])
			if err == syscall.EAGAIN {
				break
			}
			if err != 0 {
				return done, err
			}
			done += n
		}
		if done == len(b) {
			return done, nil
		}
		if !c.poll() {
			return done, errConnClosed
		}
	}
	n, err := c.f.Write(b[done:])
	return done + n, err
}

// Close closes the connection (after Server.Close, f may be closed
// already; closing it twice is harmless) and makes c ready for the next.
func (c *fdConn) Close() {
	if c.f == nil {
		if c.fd >= 0 {
			_, _, _ = syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(c.fd), 0, 0)
		}
	} else {
		c.s.mu.Lock()
		delete(c.s.files, c.f)
		c.s.mu.Unlock()
		c.f.Close()
	}
	*c = fdConn{fd: -1, s: c.s}
}

// netConn is a net.Conn as a clientConn (listeners without a descriptor).
type netConn struct{ net.Conn }

func (c netConn) setReadTimeout(d time.Duration) {
	_ = c.SetReadDeadline(time.Now().Add(d))
}

func (c netConn) setWriteTimeout(d time.Duration) {
	_ = c.SetWriteDeadline(time.Now().Add(d))
}

// rawRW is read(2) or write(2) (trap) on a non-blocking descriptor,
// retried on EINTR. Calls that cannot block go through RawSyscall: the
// runtime's entersyscall/exitsyscall around a plain Syscall, made for
// calls that may block, cost more than these calls take.
func rawRW(trap uintptr, fd int, b []byte) (int, syscall.Errno) {
	for {
		n, _, e := syscall.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
		if e != syscall.EINTR {
			if e != 0 {
				return 0, e
			}
			return int(n), 0
		}
	}
}

// acceptor accepts with accept4 on a duplicate of a listener's
// descriptor, served by the poller (a listener's own RawConn cannot wait
// for reads); nil when the listener has no descriptor (it is then used as
// it is). The duplicate is closed with the listener (close).
type acceptor struct {
	f  *os.File
	rc syscall.RawConn
	// The result of the last accept4 (accept), and the function doing it.
	fd  int
	err error
	try func(uintptr) bool
}

func newAcceptor(l net.Listener) *acceptor {
	sc, ok := l.(syscall.Conn)
	if !ok {
		return nil
	}
	lrc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	dup := dupNonblock(lrc)
	if dup < 0 {
		return nil
	}
	f := os.NewFile(uintptr(dup), "mux-listener")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil
	}
	return &acceptor{f: f, rc: rc}
}

// dupNonblock is a non-blocking, close-on-exec duplicate of rc's
// descriptor, or -1.
func dupNonblock(rc syscall.RawConn) int {
	dup := -1
	if err := rc.Control(func(fd uintptr) {
		if r, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_DUPFD_CLOEXEC, 0); e == 0 {
			dup = int(r)
		}
	}); err != nil || dup < 0 {
		return -1
	}
	if err := syscall.SetNonblock(dup, true); err != nil {
		syscall.Close(dup)
		return -1
	}
	return dup
}

// dup is another duplicate of the listener's descriptor, not on the
// runtime's poller (for the owner's epoll set: front.go), or -1.
func (a *acceptor) dup() int { return dupNonblock(a.rc) }

func (a *acceptor) close() {
	if a != nil {
		a.f.Close()
	}
}

// accept returns a new non-blocking, close-on-exec descriptor. Errors
// are the poller's (os.ErrClosed once closed) or accept4's. Only the
// goroutine of Serve calls it: the function given to the poller is bound
// once (a.try), so an accept allocates nothing.
func (a *acceptor) accept() (int, error) {
	a.fd, a.err = -1, nil
	if a.try == nil {
		a.try = a.accept4
	}
	if err := a.rc.Read(a.try); err != nil {
		return -1, err
	}
	return a.fd, a.err
}

func (a *acceptor) accept4(lfd uintptr) bool {
	fd, e := accept4(lfd)
	switch e {
	case 0:
		a.fd = fd
	case syscall.EAGAIN:
		return false
	default:
		a.err = e
	}
	return true
}

// accept4 takes one connection from the listening descriptor lfd as a
// non-blocking, close-on-exec descriptor, retrying on EINTR and on
// connections aborted before they were taken. It cannot block (lfd is
// non-blocking), hence RawSyscall6.
func accept4(lfd uintptr) (int, syscall.Errno) {
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_ACCEPT4, lfd, 0, 0, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0, 0)
		if e != syscall.EINTR && e != syscall.ECONNABORTED {
			return int(r), e
		}
	}
}

// reqBuf is a connection goroutine's request buffer: maxLine bytes for
// the line and a scratch area for the rest of a longer one.
type reqBuf struct {
	line    [maxLine]byte
	scratch [512]byte
}
