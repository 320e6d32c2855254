//go:build linux

package rawio

import (
	"syscall"
	"unsafe"
)

// The calls below serve bare non-blocking descriptors that are on no
// poller of the runtime's. They cannot block, hence RawSyscall: no
// entersyscall/exitsyscall. They are built under -race too, but carry no
// race annotations: a reader that must learn from the race detector that
// a peer in the same process wrote first uses the syscall package's
// Read (internal/netserve does, under -race).

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

// PendingFD reports whether the socket fd holds bytes not yet read: a
// recv(2) with MSG_PEEK|MSG_DONTWAIT of one byte, which takes nothing
// and never waits. An empty, closed or failed socket has none.
func PendingFD(fd int) bool {
	var b [1]byte
	for {
		n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		if e != syscall.EINTR {
			return e == 0 && n > 0
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

// Accept4From is Accept4 that also returns the peer's address: rsa is
// filled and n says how many of its bytes are the address.
func Accept4From(lfd uintptr, rsa *syscall.RawSockaddrAny) (fd int, n uint32, errno syscall.Errno) {
	for {
		n = uint32(unsafe.Sizeof(*rsa))
		r, _, e := syscall.RawSyscall6(syscall.SYS_ACCEPT4, lfd, uintptr(unsafe.Pointer(rsa)), uintptr(unsafe.Pointer(&n)),
			syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0, 0)
		if e != syscall.EINTR && e != syscall.ECONNABORTED {
			return int(r), n, e
		}
	}
}
