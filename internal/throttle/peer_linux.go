//go:build linux

package throttle

import (
	"net"
	"strconv"

	"golang.org/x/sys/unix"
)

// sender names the process at the other end of c for log lines: its pid
// on a unix socket (SO_PEERCRED: the process that connected), else its
// address.
func sender(c net.Conn) string {
	if uc, ok := c.(*net.UnixConn); ok {
		if raw, err := uc.SyscallConn(); err == nil {
			var cred *unix.Ucred
			var cerr error
			if err := raw.Control(func(fd uintptr) {
				cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
			}); err == nil && cerr == nil {
				return "pid " + strconv.Itoa(int(cred.Pid))
			}
		}
	}
	return c.RemoteAddr().String()
}
