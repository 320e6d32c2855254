//go:build linux && !race

package rawio

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// Supported says New gives raw I/O (Linux, not under -race).
const Supported = true

// Conn reads and writes one connected socket with raw read(2) and
// write(2). One is made per connection and reused: a read or a write
// allocates nothing (the functions handed to syscall.RawConn are made
// once, in New, and keep their state in the Conn). As on net.Conn, reads
// and writes may come from several goroutines at once: each Write is
// whole and in order with the others, as each Read is.
type Conn struct {
	rc     syscall.RawConn
	rmu    sync.Mutex // one Read at a time: it owns rd
	wmu    sync.Mutex // one Write at a time: it owns wr
	rd, wr op
}

// op is the state of one read or write, kept between the calls of the
// function syscall.RawConn runs.
type op struct {
	b     []byte
	n     int
	errno syscall.Errno
	fn    func(fd uintptr) bool
}

// New returns raw I/O for c, or nil when c has no raw connection (not a
// socket of the net package).
func New(c net.Conn) *Conn {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return newConn(rc)
}

func newConn(rc syscall.RawConn) *Conn {
	c := &Conn{rc: rc}
	c.rd.fn = c.read
	c.wr.fn = c.write
	return c
}

// Read reads into p, waiting in the netpoller (with the connection's
// read deadline) while nothing is there. End of stream is io.EOF.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.rd.b, c.rd.n, c.rd.errno = p, 0, 0
	err := c.rc.Read(c.rd.fn)
	n, errno := c.rd.n, c.rd.errno
	c.rd.b = nil
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, os.NewSyscallError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c *Conn) read(fd uintptr) bool {
	p := c.rd.b
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		c.rd.n, c.rd.errno = int(r), e
		if e != syscall.EINTR {
			return e != syscall.EAGAIN
		}
	}
}

// Write writes all of b, waiting in the netpoller (with the connection's
// write deadline) while the socket's buffer is full.
func (c *Conn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wr.b, c.wr.n, c.wr.errno = b, 0, 0
	err := c.rc.Write(c.wr.fn)
	done, errno := c.wr.n, c.wr.errno
	c.wr.b = nil
	if err == nil && errno != 0 {
		err = os.NewSyscallError("write", errno)
	}
	return done, err
}

func (c *Conn) write(fd uintptr) bool {
	b := c.wr.b
	for c.wr.n < len(b) {
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[c.wr.n])), uintptr(len(b)-c.wr.n))
		switch e {
		case 0:
			c.wr.n += int(r)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			c.wr.errno = e
			return true
		}
	}
	return true
}
