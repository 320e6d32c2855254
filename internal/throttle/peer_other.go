//go:build !linux

package throttle

import "net"

// sender names the other end of c for log lines: its address (the peer's
// pid is read on Linux only).
func sender(c net.Conn) string { return c.RemoteAddr().String() }
