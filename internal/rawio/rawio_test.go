//go:build linux && !race

package rawio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// unixPair returns both ends of a connected unix stream socket, and the
// raw connection of the first.
func unixPair(t *testing.T) (*net.UnixConn, *net.UnixConn, syscall.RawConn) {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	rc, err := a.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return a.(*net.UnixConn), b.(*net.UnixConn), rc
}

// TestRawWriteFullBuffer: a write far larger than the socket buffer
// waits in the netpoller while the peer is slow, and every byte arrives
// in order.
func TestRawWriteFullBuffer(t *testing.T) {
	_, b, rc := unixPair(t)
	want := make([]byte, 4<<20)
	for i := range want {
		want[i] = byte(i * 7)
	}
	got := make(chan []byte, 1)
	go func() {
		var buf bytes.Buffer
		p := make([]byte, 1000)
		for buf.Len() < len(want) {
			n, err := b.Read(p)
			buf.Write(p[:n])
			if err != nil {
				break
			}
		}
		got <- buf.Bytes()
	}()
	n, err := Write(rc, want)
	if err != nil || n != len(want) {
		t.Fatalf("rawWrite: %d, %v; want %d, nil", n, err, len(want))
	}
	if g := <-got; !bytes.Equal(g, want) {
		t.Fatalf("the peer read %d bytes, not the %d written", len(g), len(want))
	}
}

// TestRawReadWaits: a read waits for data, returns what arrived, and
// io.EOF once the peer has closed.
func TestRawReadWaits(t *testing.T) {
	_, b, rc := unixPair(t)
	go func() {
		time.Sleep(20 * time.Millisecond)
		b.Write([]byte("hello"))
		b.Close()
	}()
	p := make([]byte, 16)
	n, err := Read(rc, p)
	if err != nil || string(p[:n]) != "hello" {
		t.Fatalf("rawRead: %q, %v; want \"hello\", nil", p[:n], err)
	}
	if n, err := Read(rc, p); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("rawRead after the peer closed: %d, %v; want 0, io.EOF", n, err)
	}
}

// TestRawReadDeadlineAndClose: the connection's read deadline and Close
// end a waiting read with the errors net.Conn gives.
func TestRawReadDeadlineAndClose(t *testing.T) {
	a, _, rc := unixPair(t)
	p := make([]byte, 16)
	must(t, a.SetReadDeadline(time.Now().Add(20*time.Millisecond)))
	if _, err := Read(rc, p); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("rawRead past the deadline: %v; want os.ErrDeadlineExceeded", err)
	}
	must(t, a.SetReadDeadline(time.Time{}))
	go func() {
		time.Sleep(20 * time.Millisecond)
		a.Close()
	}()
	if _, err := Read(rc, p); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("rawRead on a closed connection: %v; want net.ErrClosed", err)
	}
	if _, err := Write(rc, []byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("rawWrite on a closed connection: %v; want net.ErrClosed", err)
	}
}

// TestRawWriteError: a write to a connection whose peer has gone is an
// error (EPIPE), not a hang.
func TestRawWriteError(t *testing.T) {
	_, b, rc := unixPair(t)
	b.Close()
	var err error
	for range 100 {
		if _, err = Write(rc, make([]byte, 64<<10)); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("rawWrite to a closed peer: %v; want EPIPE or ECONNRESET", err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
