package milter

import "syscall"

const quickAckSupported = true

// quickAck re-arms TCP_QUICKACK: the kernel ACKs what it has received at
// once instead of delaying the ACK. Linux clears the flag again on its
// own, so it is set after every read.
func quickAck(rc syscall.RawConn) {
	rc.Control(func(fd uintptr) {
		syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
	})
}
