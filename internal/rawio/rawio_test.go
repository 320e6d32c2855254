//go:build linux && !race

package rawio

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/wait"
)

// unixPair returns both ends of a connected unix stream socket, and raw
// I/O on the first.
func unixPair(t *testing.T) (*net.UnixConn, *net.UnixConn, *Conn) {
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
	rc := New(a)
	if rc == nil {
		t.Fatal("no raw I/O for a unix socket")
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
	n, err := rc.Write(want)
	if err != nil || n != len(want) {
		t.Fatalf("rawWrite: %d, %v; want %d, nil", n, err, len(want))
	}
	if g := <-got; !bytes.Equal(g, want) {
		t.Fatalf("the peer read %d bytes, not the %d written", len(g), len(want))
	}
}

// waitingConn is raw I/O on a whose reads say on waiting when they
// found nothing to read and are about to wait in the netpoller.
func waitingConn(t *testing.T, a *net.UnixConn) (*Conn, <-chan struct{}) {
	t.Helper()
	rc, err := a.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	w := &waitingRaw{RawConn: rc, waiting: make(chan struct{}, 1)}
	return newConn(w), w.waiting
}

type waitingRaw struct {
	syscall.RawConn
	waiting chan struct{}
}

func (w *waitingRaw) Read(f func(fd uintptr) bool) error {
	return w.RawConn.Read(func(fd uintptr) bool {
		done := f(fd)
		if !done {
			select {
			case w.waiting <- struct{}{}:
			default:
			}
		}
		return done
	})
}

// afterWait runs do once the read has gone to wait, or gives up when the
// test ends (stop); the read's deadline fails the test when it never
// waits.
func afterWait(waiting <-chan struct{}, do func()) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-waiting:
			do()
		case <-quit:
		}
	}()
	return func() { close(quit); <-done }
}

// TestRawReadWaits: a read waits for data, returns what arrived, and
// io.EOF once the peer has closed.
func TestRawReadWaits(t *testing.T) {
	a, b, _ := unixPair(t)
	rc, waiting := waitingConn(t, a)
	must(t, a.SetReadDeadline(time.Now().Add(wait.Timeout)))
	defer afterWait(waiting, func() {
		b.Write([]byte("hello"))
		b.Close()
	})()
	p := make([]byte, 16)
	n, err := rc.Read(p)
	if err != nil || string(p[:n]) != "hello" {
		t.Fatalf("rawRead: %q, %v; want \"hello\", nil", p[:n], err)
	}
	if n, err := rc.Read(p); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("rawRead after the peer closed: %d, %v; want 0, io.EOF", n, err)
	}
}

// TestRawReadDeadlineAndClose: the connection's read deadline and Close
// end a waiting read with the errors net.Conn gives.
func TestRawReadDeadlineAndClose(t *testing.T) {
	a, _, rc := unixPair(t)
	p := make([]byte, 16)
	must(t, a.SetReadDeadline(time.Now().Add(20*time.Millisecond)))
	if _, err := rc.Read(p); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("rawRead past the deadline: %v; want os.ErrDeadlineExceeded", err)
	}
	// Closed while it waits: the read's deadline fails the test when it
	// never waits.
	wc, waiting := waitingConn(t, a)
	must(t, a.SetReadDeadline(time.Now().Add(wait.Timeout)))
	defer afterWait(waiting, func() { a.Close() })()
	if _, err := wc.Read(p); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("rawRead on a closed connection: %v; want net.ErrClosed", err)
	}
	if _, err := rc.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
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
		if _, err = rc.Write(make([]byte, 64<<10)); err != nil {
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

// TestReadWriteAllocateNothing: reads and writes reuse what New made.
func TestReadWriteAllocateNothing(t *testing.T) {
	_, b, rc := unixPair(t)
	p, msg := make([]byte, 16), []byte("ping")
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := rc.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(b, p[:4]); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Write(msg); err != nil {
			t.Fatal(err)
		}
		if n, err := rc.Read(p); err != nil || n != 4 {
			t.Fatalf("read %d, %v", n, err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per write and read, want 0", allocs)
	}
}

// TestNewWithoutSocket: a connection without a raw socket gets none.
func TestNewWithoutSocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if New(a) != nil {
		t.Error("New(net.Pipe end) is not nil")
	}
}

// TestConcurrentWrites: two goroutines writing at once on one Conn, as
// the throttle door's reply and its report do, each get every one of
// their writes through whole and in order.
func TestConcurrentWrites(t *testing.T) {
	_, b, rc := unixPair(t)
	const n = 20000
	msgs := [2][]byte{[]byte("A123456789012345678901234567890123\n"), []byte("B1234567890123456789012345678901234567890123456789\n")}
	got := make(chan map[byte]int, 1)
	go func() {
		seen := map[byte]int{}
		r := bufio.NewReader(b)
		for range 2 * n {
			line, err := r.ReadBytes('\n')
			if err != nil {
				break
			}
			k := line[0]
			if !bytes.Equal(line, msgs[0]) && !bytes.Equal(line, msgs[1]) {
				k = '?'
			}
			seen[k]++
		}
		got <- seen
	}()
	done := make(chan error, 2)
	for _, m := range msgs {
		go func() {
			for range n {
				if k, err := rc.Write(m); err != nil || k != len(m) {
					done <- fmt.Errorf("write %d of %d: %v", k, len(m), err)
					return
				}
			}
			done <- nil
		}()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if seen := <-got; seen['A'] != n || seen['B'] != n || seen['?'] != 0 {
		t.Fatalf("the peer read %d A lines, %d B lines, %d broken ones; want %d, %d, 0", seen['A'], seen['B'], seen['?'], n, n)
	}
}
