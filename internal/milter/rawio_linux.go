//go:build linux && !race

package milter

import (
	"io"
	"os"
	"syscall"
	"unsafe"
)

// Packet I/O without waking the Go runtime's monitor thread. A read or a
// write through net.Conn is a syscall.Syscall, which tells the scheduler a
// goroutine enters a possibly blocking call; when the runtime was idle
// (every P idle, the monitor thread asleep) that wakes the monitor thread,
// which then polls every 20 us until the runtime is idle again. A milter
// between an MTA's packets is idle, so that happened at every packet: on
// Postfix with a class-caps milter, about half of sluice's CPU time per
// message and most of its context switches (docs/milter.md,
// "Performance"). The sockets are non-blocking, so read(2) and write(2)
// never block and may be issued as raw syscalls, which the scheduler does
// not see; syscall.RawConn's Read and Write still wait in the netpoller
// (with the connection's deadlines) when the socket is not ready.
//
// Not under the race detector: it learns of the ordering a socket gives
// between two goroutines of one process (a test writing a packet, the
// engine reading it) from annotations inside net.Conn's Read and Write,
// which raw syscalls bypass; a -race build uses net.Conn (rawio_other.go).

const rawIOSupported = true

// rawRead reads into p with read(2) on rc, waiting in the netpoller while
// nothing is there. End of stream is io.EOF.
func rawRead(rc syscall.RawConn, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := rc.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			n, errno = int(r), e
			if e != syscall.EINTR {
				return e != syscall.EAGAIN
			}
		}
	})
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

// rawWrite writes all of b with write(2) on rc, waiting in the netpoller
// while the socket's buffer is full.
func rawWrite(rc syscall.RawConn, b []byte) (int, error) {
	done := 0
	var errno syscall.Errno
	err := rc.Write(func(fd uintptr) bool {
		for done < len(b) {
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[done])), uintptr(len(b)-done))
			switch e {
			case 0:
				done += int(r)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				errno = e
				return true
			}
		}
		return true
	})
	if err == nil && errno != 0 {
		err = os.NewSyscallError("write", errno)
	}
	return done, err
}
