package gofloor

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// echoOnce answers a connection with what it reads first.
func echoOnce(c net.Conn) {
	defer c.Close()
	b := make([]byte, 16)
	n, _ := c.Read(b)
	c.Write(b[:n])
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != msg {
		t.Fatalf("read %q, %v; want %q", got, err, msg)
	}
}

// TestServeConnectionsApart: a connection that has not spoken yet does
// not hold up the next one (each has its goroutine), and Serve returns nil
// once the listener is closed.
func TestServeConnectionsApart(t *testing.T) {
	l := listen(t)
	done := make(chan error, 1)
	go func() { done <- Serve(l, echoOnce) }()
	first, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, second, "second")
	roundTrip(t, first, "first")
	l.Close()
	if err := <-done; err != nil {
		t.Fatalf("Serve after Close: %v, want nil", err)
	}
}

// TestRunStopsOnSIGTERM: SIGTERM closes the listener and Run returns nil.
func TestRunStopsOnSIGTERM(t *testing.T) {
	l := listen(t)
	done := make(chan error, 1)
	go func() { done <- Run(l, echoOnce) }()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c, "up") // Run is serving, its handler installed
	c.Close()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after SIGTERM: %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after SIGTERM")
	}
}
