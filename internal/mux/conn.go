package mux

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// The milter opens a new connection for every request, so the per
// connection cost counts: the main socket's front (front.go) accepts with
// accept4 itself (no addresses asked for) on a duplicate of the
// listener's descriptor, and a connection is a bare non-blocking
// descriptor whose reads and writes are single raw system calls. Only a
// connection handed to a connection goroutine (the slow path) becomes an
// *os.File on the runtime's poller (fileConn), with deadlines, which
// Server.Close closes.

// fileConn is a connection goroutine's connection.
type fileConn struct{ *os.File }

func (c fileConn) setReadTimeout(d time.Duration) {
	_ = c.SetReadDeadline(time.Now().Add(d))
}

func (c fileConn) setWriteTimeout(d time.Duration) {
	_ = c.SetWriteDeadline(time.Now().Add(d))
}

// rawRW is read(2) or write(2) (trap) on a non-blocking descriptor,
// retried on EINTR. These calls cannot block, hence RawSyscall: no
// entersyscall/exitsyscall.
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

// closeRaw closes a bare descriptor.
func closeRaw(fd int) {
	if fd >= 0 {
		_, _, _ = syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0)
	}
}

// rawConn is l's descriptor.
func rawConn(l net.Listener) (syscall.RawConn, error) {
	sc, ok := l.(syscall.Conn)
	if !ok {
		return nil, errors.New("mux: the listener has no descriptor")
	}
	return sc.SyscallConn()
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

// acceptor accepts on a duplicate of the restricted socket's descriptor,
// served by the runtime's poller (a listener's own RawConn cannot wait
// for reads). The duplicate is closed with the listener (close).
type acceptor struct {
	f  *os.File
	rc syscall.RawConn
	// The result of the last accept4 (accept).
	fd  int
	err error
}

// newAcceptor is an acceptor on a duplicate of rc's descriptor, or nil.
func newAcceptor(rc syscall.RawConn) *acceptor {
	dup := dupNonblock(rc)
	if dup < 0 {
		return nil
	}
	f := os.NewFile(uintptr(dup), "mux-listener")
	frc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil
	}
	return &acceptor{f: f, rc: frc}
}

func (a *acceptor) close() {
	if a != nil {
		a.f.Close()
	}
}

// accept returns a new non-blocking, close-on-exec descriptor. Errors
// are the poller's (os.ErrClosed once closed) or accept4's.
func (a *acceptor) accept() (int, error) {
	a.fd, a.err = -1, nil
	if err := a.rc.Read(func(lfd uintptr) bool {
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
	}); err != nil {
		return -1, err
	}
	return a.fd, a.err
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

// reqBuf is a request buffer: maxLine bytes for the line and a scratch
// area for the rest of a longer one.
type reqBuf struct {
	line    [maxLine]byte
	scratch [512]byte
}

// inline is what the front read of a connection before handing it to a
// connection goroutine: a whole request (line, whole), or the first bytes
// of one (pre), and how much of the timeout the wait for them spent.
type inline struct {
	pre   []byte
	line  string
	whole bool
	spent time.Duration
}

// firstRead is what a connection's read of n bytes into rb (or its error
// e) brought, spent after the accept: a whole line (whole), or else what
// to hand a connection goroutine with the connection (the bytes of a
// part of a line, and the time spent).
func firstRead(rb *reqBuf, n int, e syscall.Errno, spent time.Duration) (line string, in inline, whole bool) {
	in.spent = spent
	if e != 0 || n == 0 {
		return "", in, false
	}
	i := indexNL(rb.line[:n])
	if i < 0 {
		in.pre = append([]byte(nil), rb.line[:n]...)
		return "", in, false
	}
	return frameLine(rb.line[:i+1]), in, true
}

// write writes b to the connection fd and closes it, without waiting: a
// reply the socket does not take at once (a client that does not read)
// is finished by a goroutine of its own under the timeout (finishLater).
func (s *Server) write(fd int, b []byte) {
	for len(b) > 0 {
		n, e := rawRW(syscall.SYS_WRITE, fd, b)
		if e == syscall.EAGAIN {
			s.finishLater(fd, append([]byte(nil), b...))
			return
		}
		if e != 0 {
			break
		}
		b = b[n:]
	}
	s.closeConn(fd)
}

// finishLater writes the rest of a reply under the timeout and closes the
// connection, on a goroutine of its own (Close interrupts the write).
func (s *Server) finishLater(fd int, rest []byte) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.closeConn(fd)
		return
	}
	f := os.NewFile(uintptr(fd), "mux-client")
	s.files[f] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		_ = f.SetWriteDeadline(time.Now().Add(s.o.Timeout))
		_, _ = f.Write(rest)
		s.mu.Lock()
		delete(s.files, f)
		s.mu.Unlock()
		f.Close()
		s.release()
	}()
}
