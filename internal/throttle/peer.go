package throttle

import (
	"net"
	"strconv"

	"sluice/internal/peercred"
)

// sender names the process at the other end of c for log lines: its pid
// on a unix socket (SO_PEERCRED: the process that connected), else its
// address.
func sender(c net.Conn) string {
	if pid, err := peercred.PID(c); err == nil {
		return "pid " + strconv.Itoa(pid)
	}
	return c.RemoteAddr().String()
}
