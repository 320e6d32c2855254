//go:build !linux || race

package rawio

import "syscall"

// Supported says Read and Write may be used: not here.
const Supported = false

// Read is not available here: see Supported.
func Read(syscall.RawConn, []byte) (int, error) {
	panic("rawio: raw I/O is Linux-only, and off under -race")
}

// Write is not available here: see Supported.
func Write(syscall.RawConn, []byte) (int, error) {
	panic("rawio: raw I/O is Linux-only, and off under -race")
}
