package mux

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// The milter opens a new connection for every request, so the per
// connection cost of net.Listener.Accept and net.Conn counts: an accept
// there is accept4 plus getsockname, two epoll_ctl calls (register and
// unregister with the netpoller) and half a dozen allocations, and the
// first read of a connection usually finds the request already there.
// So Serve accepts with accept4 itself (no addresses asked for) and a
// connection starts as a bare non-blocking descriptor (fdConn): reads and
// writes that complete at once are single system calls, and only one that
// would block registers the descriptor with the runtime's poller (as an
// *os.File), from where deadlines and Server.Close work as for any file.

// fdConn is one accepted connection, used by its connection goroutine
// only, except for f, which Server.Close may close (under Server.mu).
type fdConn struct {
	fd int
	// f is the descriptor registered with the poller, once an operation
	// would have blocked; from then on every operation goes through it.
	f *os.File
	// rd and wd are the deadlines to apply when f is made.
	rd, wd time.Time
	s      *Server
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
	if !c.rd.IsZero() {
		_ = c.f.SetReadDeadline(c.rd)
	}
	if !c.wd.IsZero() {
		_ = c.f.SetWriteDeadline(c.wd)
	}
	return true
}

func (c *fdConn) SetReadDeadline(t time.Time) error {
	if c.f != nil {
		return c.f.SetReadDeadline(t)
	}
	c.rd = t
	return nil
}

func (c *fdConn) SetWriteDeadline(t time.Time) error {
	if c.f != nil {
		return c.f.SetWriteDeadline(t)
	}
	c.wd = t
	return nil
}

func (c *fdConn) Read(b []byte) (int, error) {
	if c.f == nil {
		n, err := ignoringEINTR(func() (int, error) { return syscall.Read(c.fd, b) })
		switch {
		case err == nil && n == 0 && len(b) > 0:
			return 0, io.EOF
		case err == nil:
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
			n, err := ignoringEINTR(func() (int, error) { return syscall.Write(c.fd, b[done:]) })
			if err == syscall.EAGAIN {
				break
			}
			if err != nil {
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
// already; closing it twice is harmless).
func (c *fdConn) Close() {
	if c.f == nil {
		if c.fd >= 0 {
			syscall.Close(c.fd)
		}
		return
	}
	c.s.mu.Lock()
	delete(c.s.files, c.f)
	c.s.mu.Unlock()
	c.f.Close()
}

func ignoringEINTR(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if err != syscall.EINTR {
			if n < 0 {
				n = 0
			}
			return n, err
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
	dup := -1
	if err := lrc.Control(func(fd uintptr) {
		if r, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_DUPFD_CLOEXEC, 0); e == 0 {
			dup = int(r)
		}
	}); err != nil || dup < 0 {
		return nil
	}
	if err := syscall.SetNonblock(dup, true); err != nil {
		syscall.Close(dup)
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

func (a *acceptor) close() {
	if a != nil {
		a.f.Close()
	}
}

// accept returns a new non-blocking, close-on-exec descriptor. Errors
// are the poller's (os.ErrClosed once closed) or accept4's.
func (a *acceptor) accept() (int, error) {
	fd, aerr := -1, error(nil)
	err := a.rc.Read(func(lfd uintptr) bool {
		for {
			r, _, e := syscall.Syscall6(syscall.SYS_ACCEPT4, lfd, 0, 0, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0, 0)
			switch e {
			case 0:
				fd = int(r)
				return true
			case syscall.EINTR, syscall.ECONNABORTED:
				continue
			case syscall.EAGAIN:
				return false
			default:
				aerr = e
				return true
			}
		}
	})
	if err != nil {
		return -1, err
	}
	return fd, aerr
}

// bufPool holds request buffers (maxLine bytes).
var bufPool = sync.Pool{New: func() any { return new([maxLine]byte) }}
