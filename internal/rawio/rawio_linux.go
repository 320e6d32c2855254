//go:build linux && !race

package rawio

import (
	"io"
	"os"
	"syscall"
	"unsafe"
)

// Supported says Read and Write may be used (Linux, not under -race).
const Supported = true

// Read reads into p with read(2) on rc, waiting in the netpoller while
// nothing is there. End of stream is io.EOF.
func Read(rc syscall.RawConn, p []byte) (int, error) {
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

// Write writes all of b with write(2) on rc, waiting in the netpoller
// while the socket's buffer is full.
func Write(rc syscall.RawConn, b []byte) (int, error) {
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
