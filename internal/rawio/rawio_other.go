//go:build !linux || race

package rawio

import "net"

// Supported says New gives raw I/O: not here.
const Supported = false

// Conn is raw I/O for one connection; there is none here.
type Conn struct{}

// New returns nil: raw I/O is Linux-only, and off under -race.
func New(net.Conn) *Conn { return nil }

// Read is not available here: New gives no Conn.
func (*Conn) Read([]byte) (int, error) {
	panic("rawio: raw I/O is Linux-only, and off under -race")
}

// Write is not available here: New gives no Conn.
func (*Conn) Write([]byte) (int, error) {
	panic("rawio: raw I/O is Linux-only, and off under -race")
}
