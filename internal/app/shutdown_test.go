package app

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sluice/internal/config"
)

// eventuallyTrue polls cond for up to a minute (no timing claim: only a
// bound on a hung test).
func eventuallyTrue(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for end := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// unread is what c sent that its peer has not read yet (SIOCOUTQ).
func unread(t *testing.T, c net.Conn) int {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := -1
	if err := rc.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) }); err != nil || n < 0 {
		t.Fatalf("SIOCOUTQ: %d, %v", n, err)
	}
	return n
}

// TestShutdownStopsEveryDoorFirst: while one door (anvil) waits for a
// client in the middle of a request, no other door accepts: every
// listener is closed before any door drains.
func TestShutdownStopsEveryDoorFirst(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, dir, strings.Replace(cfgText(dir, "2"), "[anvil]\n", "[anvil]\nrequest_timeout = \"10m\"\n", 1))
	cfg, errs := config.Load(path)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	d, err := New(cfg, path, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	d.Start()
	// A client in the middle of a request holds anvil's drain.
	c, err := net.Dial("unix", filepath.Join(dir, "anvil"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("request=lookup\nident=smtp:192.0.2.1")); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue(t, func() bool { return d.anvil.Conns() == 1 }, "anvil's connection")
	// Mid-request once anvil has read those bytes (before, the connection
	// is idle, and Shutdown closes it at once).
	eventuallyTrue(t, func() bool { return unread(t, c) == 0 }, "anvil to read the partial request")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Shutdown(ctx) }()
	eventuallyTrue(t, func() bool {
		_, err := os.Stat(filepath.Join(dir, "anvil"))
		return os.IsNotExist(err)
	}, "anvil's socket to go")
	for _, door := range []string{"policy", "throttle", "milter", "web"} {
		if c, err := net.Dial("unix", filepath.Join(dir, door)); err == nil {
			c.Close()
			t.Errorf("%s accepts a connection while anvil drains", door)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) while a client was mid-request", err)
	default:
	}
	c.Close() // the request ends: the drain completes
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// TestFailedDoorIsReported: a listener that fails while the daemon runs
// is reported on Failed, naming the door; Shutdown still stops cleanly.
func TestFailedDoorIsReported(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, dir, cfgText(dir, "2"))
	d := startDaemon(t, path)
	var bl *boundListener
	for i := range d.listeners {
		if d.listeners[i].door == "policy" {
			bl = &d.listeners[i]
		}
	}
	if bl == nil {
		t.Fatal("no policy listener")
	}
	bl.l.Close() // as if the socket broke under the accept loop
	select {
	case err := <-d.Failed():
		if !strings.Contains(err.Error(), "policy listener") || !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Failed: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("a failed listener was not reported")
	}
	select {
	case err := <-d.Failed():
		t.Fatalf("a second failure reported: %v", err)
	default:
	}
}
