package fakeserver

import (
	"bufio"
	"io"
	"net"
	"path/filepath"
	"testing"
)

// TestServeAndClose: each connection gets its handler; Close ends a
// handler blocked on its connection and the listener.
func TestServeAndClose(t *testing.T) {
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	s := Start(t, ln, func(c net.Conn) {
		defer close(ended)
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return
		}
		_, _ = io.WriteString(c, "echo "+line)
		_, _ = c.Read(make([]byte, 1)) // blocks until Close
	})
	c, err := net.Dial("unix", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "hi\n"); err != nil {
		t.Fatal(err)
	}
	if got, err := bufio.NewReader(c).ReadString('\n'); err != nil || got != "echo hi\n" {
		t.Fatalf("reply %q, %v", got, err)
	}
	s.Close()
	<-ended
	if _, err := net.Dial("unix", s.Addr()); err == nil {
		t.Error("the listener still accepts after Close")
	}
}
