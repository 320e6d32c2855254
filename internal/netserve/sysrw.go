//go:build linux && !race

package netserve

import (
	"syscall"
	"unsafe"
)

// sysRead is read(2) as a raw system call: it does not enter the
// scheduler. p is not empty.
func sysRead(fd int, p []byte) (int, syscall.Errno) {
	r, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(r), e
}

// sysWrite is write(2) as a raw system call. b is not empty.
func sysWrite(fd int, b []byte) (int, syscall.Errno) {
	r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	return int(r), e
}
