//go:build !linux || race

package milter

import "syscall"

const rawIOSupported = false

func rawRead(syscall.RawConn, []byte) (int, error) {
	panic("milter: raw I/O is Linux-only, and off under -race")
}
func rawWrite(syscall.RawConn, []byte) (int, error) {
	panic("milter: raw I/O is Linux-only, and off under -race")
}
