package daemons

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Listening reports whether something accepts connections on addr
// (host:port).
func Listening(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// WaitTCP waits until something listens on addr, failing at once if p
// (if not nil) has stopped running.
func WaitTCP(ctx context.Context, addr string, timeout time.Duration, p Runner) error {
	if err := poll(ctx, timeout, p, func() bool { return Listening(addr) }); err != nil {
		return errors.New("waiting for a listener on " + addr + ": " + err.Error())
	}
	return nil
}

// FreeTCPPort is a TCP port no socket on this host binds, none of used,
// from 10000 up to below the kernel's ephemeral range (where any outgoing
// connection could take it before the server binds it; lib.sh's
// free_tcp_port).
func FreeTCPPort(used ...int) (int, error) {
	hi := 32767
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if eph, err := strconv.Atoi(f[0]); err == nil && eph > 11000 {
				hi = eph - 1
			}
		}
	}
	for range 500 {
		p := 10000 + rand.IntN(hi-10000+1)
		if slices.Contains(used, p) {
			continue
		}
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l.Close()
		return p, nil
	}
	return 0, errors.New("found no free TCP port")
}
