package main

import (
	"io"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestFloorRelays: with cat as the workers, a request line comes back as
// its reply, status shows every worker idle, more clients than workers
// are queued and served, and the loop stops when told.
func TestFloorRelays(t *testing.T) {
	const cat = "/bin/cat" // coreutils, on every Debian
	sock := filepath.Join(t.TempDir(), "mx.sock")
	f, err := newFloor(sock, cat, 2, 5)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	var stop [2]int
	if err := syscall.Pipe2(stop[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(stop[0])
	done := make(chan error, 1)
	go func() { done <- f.loop(stop[0]) }()
	ask := func(line string) string {
		c, err := net.Dial("unix", sock)
		if err != nil {
			return err.Error()
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, line); err != nil {
			return err.Error()
		}
		b, err := io.ReadAll(c)
		if err != nil {
			return err.Error()
		}
		return string(b)
	}
	const req = "relayok 192.0.2.1 host 25 127.0.0.1 25 Q\n"
	got := make(chan string, 6)
	for range 6 {
		go func() { got <- ask(req) }()
	}
	for range 6 {
		if r := <-got; r != req {
			t.Fatalf("relayed reply %q, want the line back from cat", r)
		}
	}
	if r := ask("status\n"); r != "II 0 0 0 0 0\n" {
		t.Fatalf("status %q, want both workers idle", r)
	}
	if _, err := syscall.Write(stop[1], []byte{1}); err != nil {
		t.Fatal(err)
	}
	syscall.Close(stop[1])
	if err := <-done; err != nil {
		t.Fatalf("loop: %v", err)
	}
}
