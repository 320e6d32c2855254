//go:build linux && !race

package netserve

import (
	"syscall"

	"sluice/internal/rawio"
)

// sysRead is read(2) as a raw system call (internal/rawio): it does not
// enter the scheduler.
func sysRead(fd int, p []byte) (int, syscall.Errno) { return rawio.ReadFD(fd, p) }

// sysWrite is write(2) as a raw system call.
func sysWrite(fd int, b []byte) (int, syscall.Errno) { return rawio.WriteFD(fd, b) }
