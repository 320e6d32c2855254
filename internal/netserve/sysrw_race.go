//go:build linux && race

package netserve

import "syscall"

// sysRead is read(2) through the syscall package, whose race annotations
// tell the race detector that what a peer wrote before its write(2)
// happened before this read (the raw call of sysrw.go has none, and the
// detector would report races that the socket orders). Same descriptor,
// same poller, same loop: only the call's wrapper differs under -race.
func sysRead(fd int, p []byte) (int, syscall.Errno) {
	n, err := syscall.Read(fd, p)
	return max(n, 0), errnoOf(err)
}

// sysWrite is write(2) through the syscall package (see sysRead).
func sysWrite(fd int, b []byte) (int, syscall.Errno) {
	n, err := syscall.Write(fd, b)
	return max(n, 0), errnoOf(err)
}

func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	return err.(syscall.Errno)
}
