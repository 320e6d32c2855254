package milter

import (
	"syscall"
	"unsafe"
)

const quickAckSupported = true

// quickAck re-arms TCP_QUICKACK: the kernel ACKs what it has received at
// once instead of delaying the ACK. Linux clears the flag again on its
// own, so it is set after every read. It is a raw syscall, like the
// packet I/O, so as not to wake the runtime's monitor thread
// (internal/rawio).
func quickAck(rc syscall.RawConn) {
	rc.Control(func(fd uintptr) {
		one := int32(1)
		syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, fd, syscall.IPPROTO_TCP, syscall.TCP_QUICKACK,
			uintptr(unsafe.Pointer(&one)), unsafe.Sizeof(one), 0)
	})
}
