package peercredtest

import (
	"bufio"
	"io"
	"net"
	"testing"
)

// TestChild: the child's side, in this process: it dials every
// connection, says so, reports the one the server closes, and ends when
// its stdin closes.
func TestChild(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	stdinR, stdinW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	go func() { done <- child("tcp "+l.Addr().String()+" 2", stdinR, outW) }()
	out := bufio.NewReader(outR)
	if line, err := out.ReadString('\n'); err != nil || line != "dialed\n" {
		t.Fatalf("first line %q %v, want dialed", line, err)
	}
	a, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a.Close()
	if line, err := out.ReadString('\n'); err != nil || line != "closed 0\n" {
		t.Fatalf("after the server closed the first: %q %v, want closed 0", line, err)
	}
	go io.Copy(io.Discard, out) // what the child says while it stops
	stdinW.Close()
	if rc := <-done; rc != 0 {
		t.Fatalf("child exited %d", rc)
	}
	if rc := child("tcp nowhere", stdinR, io.Discard); rc != 2 {
		t.Fatalf("bad orders: exit %d, want 2", rc)
	}
}
