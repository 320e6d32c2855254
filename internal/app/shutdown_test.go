package app

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/anvil/anviltest"
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

// TestShutdownStages: while the milter serves an open session, a
// Shutdown has the milter, the throttle and the web stop accepting, and
// anvil and the policy door go on accepting and answering (the session
// may ask them); it returns when the session ends. The SMTP session an
// anvil stream still held is handed to the next start: the next daemon
// counts it until smtpd, on a new stream, says disconnect.
func TestShutdownStages(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, dir, cfgText(dir, "2"))
	cfg, errs := config.Load(path)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	d, err := New(cfg, path, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	d.Start()
	m, _ := dialMilter(t, filepath.Join(dir, "milter"), "client.example", "192.0.2.9")
	held, err := anviltest.Dial("unix", filepath.Join(dir, "anvil"), false)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := held.Do("connect", "smtp:192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Shutdown(ctx) }()
	eventuallyTrue(t, func() bool {
		_, err := os.Stat(filepath.Join(dir, "milter"))
		return os.IsNotExist(err)
	}, "the milter's socket to go")
	for _, door := range []string{"throttle", "milter", "web"} {
		if c, err := net.Dial("unix", filepath.Join(dir, door)); err == nil {
			c.Close()
			t.Errorf("%s accepts a connection while the milter drains", door)
		}
	}
	late, err := anviltest.Dial("unix", filepath.Join(dir, "anvil"), false)
	if err != nil {
		t.Fatalf("anvil refuses a new stream while the milter drains: %v", err)
	}
	if r, err := late.Do("lookup", "smtp:192.0.2.1"); err != nil || r["count"] != 1 {
		t.Errorf("anvil lookup while the milter drains: %v %v", r, err)
	}
	late.Close()
	if c, err := net.Dial("unix", filepath.Join(dir, "policy")); err != nil {
		t.Errorf("the policy door refuses a connection while the milter drains: %v", err)
	} else {
		c.Close()
	}
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) while the milter serves a session", err)
	default:
	}
	m.Close() // the SMTP session ends
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, carryFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, ids, err := parseCarry(b); err != nil || len(ids) != 1 || ids[0] != "smtp:192.0.2.1" {
		t.Fatalf("handed over %q, %v", ids, err)
	}

	next := startDaemon(t, path)
	if _, err := os.Stat(filepath.Join(dir, carryFile)); !os.IsNotExist(err) {
		t.Errorf("the hand-over file is still there after the start: %v", err)
	}
	if n := next.carried.Len(); n != 1 {
		t.Fatalf("%d sessions carried, want 1", n)
	}
	cl, err := anviltest.Dial("unix", filepath.Join(dir, "anvil"), false)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if r, err := cl.Do("lookup", "smtp:192.0.2.1"); err != nil || r["count"] != 1 {
		t.Errorf("the carried session is not counted: %v %v", r, err)
	}
	if _, err := cl.Do("disconnect", "smtp:192.0.2.1"); err != nil {
		t.Fatal(err)
	}
	if r, err := cl.Do("lookup", "smtp:192.0.2.1"); err != nil || r["count"] != 0 || next.carried.Len() != 0 {
		t.Errorf("after smtpd's disconnect on a new stream: %v %v, %d carried", r, err, next.carried.Len())
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
