package main

import (
	"io"
	"net"
	"path/filepath"
	"testing"
)

// TestFloorRelays: with cat as the workers, a request line comes back as
// its reply, and status shows every worker idle, over a socket with the
// backlog asked for.
func TestFloorRelays(t *testing.T) {
	const cat = "/bin/cat" // coreutils, on every Debian
	const n = 2
	idle := make(chan *worker, n)
	for range n {
		w, err := startWorker(cat)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.stdin.Close(); w.stdout.Close() })
		idle <- w
	}
	sock := filepath.Join(t.TempDir(), "mx.sock")
	l, err := listen(sock, 5)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serveAll(l, idle, n) }()
	ask := func(line string) string {
		t.Helper()
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, line); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(c)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for range 3 {
		if got := ask("relayok 192.0.2.1 host 25 127.0.0.1 25 Q\n"); got != "relayok 192.0.2.1 host 25 127.0.0.1 25 Q\n" {
			t.Fatalf("relayed reply %q, want the line back from cat", got)
		}
	}
	if got := ask("status\n"); got != "II 0 0 0 0\n" {
		t.Fatalf("status %q, want both workers idle", got)
	}
	l.Close()
	if err := <-done; err != nil {
		t.Fatalf("serveAll after close: %v", err)
	}
}
