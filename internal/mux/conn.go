package mux

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"

	"sluice/internal/rawio"
)

// The milter opens a new connection for every request, so the per
// connection cost counts: a socket's front (front.go) accepts with
// accept4 itself (no addresses asked for) on a duplicate of the
// listener's descriptor, and a connection is a bare non-blocking
// descriptor whose reads and writes are single raw system calls
// (internal/rawio). Only a
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

// write writes b to the admitted connection fd and closes it, without
// waiting: a reply the socket does not take at once (a client that does
// not read) is finished on a goroutine of its own under the timeout
// (Close interrupts the write).
func (s *Server) write(fd int, b []byte, privileged bool) {
	for len(b) > 0 {
		n, e := rawio.WriteFD(fd, b)
		if e == syscall.EAGAIN {
			rest := append([]byte(nil), b...)
			s.goConn(fd, privileged, func(f *os.File) {
				_ = f.SetWriteDeadline(time.Now().Add(s.o.Timeout))
				_, _ = f.Write(rest)
			})
			return
		}
		if e != 0 {
			break
		}
		b = b[n:]
	}
	s.closeConn(fd, privileged)
}
