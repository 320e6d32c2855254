package sdnotify

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// listen binds a unixgram socket as systemd's notify socket and points
// the environment at it.
func listen(t *testing.T) *net.UnixConn {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return c
}

func read(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

func TestReadyReloadingStopping(t *testing.T) {
	c := listen(t)
	n, err := FromEnv()
	if err != nil || n == nil {
		t.Fatalf("FromEnv: %v, %v", n, err)
	}
	if err := n.Ready("serving 3 doors"); err != nil {
		t.Fatal(err)
	}
	if got := read(t, c); got != "READY=1\nSTATUS=serving 3 doors" {
		t.Fatalf("ready: %q", got)
	}
	if err := n.Reloading(); err != nil {
		t.Fatal(err)
	}
	got := read(t, c)
	us, ok := strings.CutPrefix(got, "RELOADING=1\nMONOTONIC_USEC=")
	if v, err := strconv.ParseInt(us, 10, 64); !ok || err != nil || v <= 0 {
		t.Fatalf("reloading: %q", got)
	}
	if err := n.Stopping(); err != nil {
		t.Fatal(err)
	}
	if got := read(t, c); got != "STOPPING=1" {
		t.Fatalf("stopping: %q", got)
	}
	if err := n.Send("READY=1\nWATCHDOG=1"); err == nil {
		t.Fatal("a state with a newline was sent")
	}
}

func TestWithoutSystemdNothingHappens(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	n, err := FromEnv()
	if err != nil || n != nil {
		t.Fatalf("FromEnv without NOTIFY_SOCKET: %v, %v", n, err)
	}
	if err := n.Ready("x"); err != nil {
		t.Fatal(err)
	}
	n.Watchdog(context.Background(), nil) // returns at once
}

func TestBadEnvironment(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "relative/path")
	if _, err := FromEnv(); err == nil {
		t.Fatal("a relative NOTIFY_SOCKET was accepted")
	}
	listen(t)
	t.Setenv("WATCHDOG_USEC", "soon")
	if _, err := FromEnv(); err == nil {
		t.Fatal("a bad WATCHDOG_USEC was accepted")
	}
}

func TestWatchdogKeepAlives(t *testing.T) {
	c := listen(t)
	t.Setenv("WATCHDOG_USEC", "20000") // 20 ms: keep-alives every 10 ms
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	n, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if n.WatchdogInterval() != 20*time.Millisecond {
		t.Fatalf("interval %v", n.WatchdogInterval())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); n.Watchdog(ctx, func() bool { return true }) }()
	for range 3 {
		if got := read(t, c); got != "WATCHDOG=1" {
			t.Fatalf("keep-alive: %q", got)
		}
	}
	cancel()
	<-done

	// Another process's watchdog is not ours.
	t.Setenv("WATCHDOG_PID", "1")
	n, err = FromEnv()
	if err != nil || n.WatchdogInterval() != 0 {
		t.Fatalf("foreign WATCHDOG_PID: %v, %v", n.WatchdogInterval(), err)
	}
}

func TestUnhealthyDaemonStopsKeepAlives(t *testing.T) {
	c := listen(t)
	t.Setenv("WATCHDOG_USEC", "20000")
	n, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	healthyCalls := make(chan struct{}, 100)
	go func() {
		defer close(done)
		n.Watchdog(ctx, func() bool { healthyCalls <- struct{}{}; return false })
	}()
	for range 3 {
		<-healthyCalls
	}
	cancel()
	<-done
	_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if b := make([]byte, 64); true {
		if n, err := c.Read(b); err == nil {
			t.Fatalf("keep-alive %q sent while unhealthy", b[:n])
		}
	}
}
