// Package sdnotify tells systemd how the daemon is doing: the sd_notify(3)
// protocol (one datagram of "KEY=VALUE" lines to $NOTIFY_SOCKET) and the
// watchdog keep-alive. Without $NOTIFY_SOCKET every call does nothing, so
// the daemon runs the same under systemd and without it.
//
// The protocol is one datagram per state change, too small to justify a
// dependency.
package sdnotify

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Notifier sends state changes to systemd. The zero value and a nil
// *Notifier do nothing.
type Notifier struct {
	addr *net.UnixAddr
	// watchdog is the interval systemd expects keep-alives within (0: no
	// watchdog).
	watchdog time.Duration
}

// FromEnv returns a Notifier for $NOTIFY_SOCKET and $WATCHDOG_USEC, or
// nil when the daemon was not started by systemd with Type=notify. An
// abstract socket is written "@name". WATCHDOG_PID, when set, must be
// this process.
func FromEnv() (*Notifier, error) {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil, nil
	}
	if path[0] != '/' && path[0] != '@' {
		return nil, fmt.Errorf("NOTIFY_SOCKET %q: not a unix socket path", path)
	}
	// Go reads a leading '@' as Linux's abstract namespace.
	n := &Notifier{addr: &net.UnixAddr{Name: path, Net: "unixgram"}}
	if us := os.Getenv("WATCHDOG_USEC"); us != "" {
		if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
			return n, nil
		}
		v, err := strconv.ParseInt(us, 10, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("WATCHDOG_USEC %q: not a positive number", us)
		}
		n.watchdog = time.Duration(v) * time.Microsecond
	}
	return n, nil
}

// Send sends state lines such as "READY=1" or "STATUS=serving".
func (n *Notifier) Send(state ...string) error {
	if n == nil || n.addr == nil {
		return nil
	}
	for _, s := range state {
		if strings.ContainsRune(s, '\n') || !strings.Contains(s, "=") {
			return fmt.Errorf("sd_notify: %q is not one KEY=VALUE line", s)
		}
	}
	c, err := net.DialUnix("unixgram", nil, n.addr)
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(strings.Join(state, "\n"))); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	return nil
}

// Ready says the daemon serves: every listener is bound.
func (n *Notifier) Ready(status string) error { return n.Send("READY=1", "STATUS="+status) }

// Reloading says a configuration reload started; call Ready after it.
// MONOTONIC_USEC is what systemd 253 and later require with RELOADING=1.
func (n *Notifier) Reloading() error {
	return n.Send("RELOADING=1", "MONOTONIC_USEC="+strconv.FormatInt(monotonicUsec(), 10))
}

// Stopping says the daemon is shutting down.
func (n *Notifier) Stopping() error { return n.Send("STOPPING=1") }

// WatchdogInterval is the interval systemd expects keep-alives within (0
// when there is no watchdog).
func (n *Notifier) WatchdogInterval() time.Duration {
	if n == nil {
		return 0
	}
	return n.watchdog
}

// Watchdog sends WATCHDOG=1 at half the watchdog interval while healthy
// reports true, until ctx ends. A daemon whose healthy check stops
// answering (a deadlock) stops the keep-alives, and systemd restarts it.
// Without a watchdog it returns at once.
func (n *Notifier) Watchdog(ctx context.Context, healthy func() bool) {
	iv := n.WatchdogInterval()
	if iv <= 0 {
		return
	}
	t := time.NewTicker(iv / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if healthy == nil || healthy() {
				_ = n.Send("WATCHDOG=1")
			}
		}
	}
}
