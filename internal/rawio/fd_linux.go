//go:build linux

package rawio

import (
	"syscall"
	"unsafe"
)

// The descriptor-level calls below serve bare non-blocking descriptors
// that are on no poller of the runtime's: the mux's connections on the
// pool's owner (internal/mux) and the workers' pipes (internal/pool).
// They cannot block, hence RawSyscall: no entersyscall/exitsyscall. They
// are built under -race too: their descriptors' peers are other
// processes, or connections whose ordering the tests learn by other
// means.

// ReadFD is read(2) on the non-blocking descriptor fd, retried on EINTR;
// end of file is a read of 0 bytes and no error.
func ReadFD(fd int, b []byte) (int, syscall.Errno) { return rw(syscall.SYS_READ, fd, b) }

// WriteFD is write(2) on the non-blocking descriptor fd, retried on
// EINTR.
func WriteFD(fd int, b []byte) (int, syscall.Errno) { return rw(syscall.SYS_WRITE, fd, b) }

func rw(trap uintptr, fd int, b []byte) (int, syscall.Errno) {
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

// CloseFD closes the bare descriptor fd; a negative fd is none.
func CloseFD(fd int) {
	if fd >= 0 {
		_, _, _ = syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0)
	}
}

// Accept4 takes one connection from the non-blocking listening
// descriptor lfd as a non-blocking, close-on-exec descriptor (no address
// asked for), retrying on EINTR and on connections aborted before they
// were taken.
func Accept4(lfd uintptr) (int, syscall.Errno) {
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_ACCEPT4, lfd, 0, 0, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0, 0)
		if e != syscall.EINTR && e != syscall.ECONNABORTED {
			return int(r), e
		}
	}
}
