package netserve

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// connServer serves network ("tcp" on loopback, "unix" in a temporary
// directory) and hands each accepted connection to the test, which ends
// it by returning from its function: the handler waits on done.
func connServer(t *testing.T, network string) (addr string, conns <-chan *Conn, done chan<- struct{}) {
	t.Helper()
	ch := make(chan *Conn, 4)
	stop := make(chan struct{})
	s := New(Options{Name: "door", Logger: slog.New(slog.DiscardHandler), ConnLimits: ConnLimits{IdleTimeout: -1, RequestTimeout: -1}},
		func(c *Conn) {
			ch <- c
			<-stop
		})
	a := "127.0.0.1:0"
	if network == "unix" {
		a = filepath.Join(t.TempDir(), "s")
	}
	l, err := net.Listen(network, a)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		s.Close()
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
		s.Wait()
	})
	return l.Addr().String(), ch, stop
}

func dialConn(t *testing.T, network, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A read parked for data ends with os.ErrDeadlineExceeded when another
// goroutine moves its deadline into the past, and reads again once the
// deadline is lifted; a deadline that passes while parked ends it too.
func TestConnDeadlineWakesParkedRead(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			addr, conns, _ := connServer(t, network)
			client := dialConn(t, network, addr)
			c := <-conns
			got := make(chan error, 1)
			go func() {
				_, err := c.Conn.Read(make([]byte, 8))
				got <- err
			}()
			c.Conn.SetReadDeadline(time.Now().Add(-time.Second))
			if err := <-got; !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("read after a past deadline: %v, want os.ErrDeadlineExceeded", err)
			}
			c.Conn.SetReadDeadline(time.Time{})
			if _, err := client.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 8)
			if n, err := c.Conn.Read(b); err != nil || string(b[:n]) != "x" {
				t.Fatalf("read after lifting the deadline: %q %v", b[:n], err)
			}
			c.Conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			if _, err := c.Conn.Read(b); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("read past its deadline: %v", err)
			}
			var ne net.Error
			if _, err := c.Conn.Read(b); !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("a deadline error is a net.Error with Timeout: %v", err)
			}
		})
	}
}

// Close wakes a parked read and a parked write with net.ErrClosed; a
// second Close is an error; the peer sees the end of the stream.
func TestConnCloseWakesParked(t *testing.T) {
	addr, conns, _ := connServer(t, "unix")
	client := dialConn(t, "unix", addr)
	c := <-conns
	rd := make(chan error, 1)
	go func() {
		_, err := c.Conn.Read(make([]byte, 8))
		rd <- err
	}()
	wr := make(chan error, 1)
	go func() {
		// More than any socket buffer: the write parks, nobody reads.
		_, err := c.Conn.Write(make([]byte, 64<<20))
		wr <- err
	}()
	time.Sleep(10 * time.Millisecond) // let both park; the outcome does not depend on it
	if err := c.Conn.Close(); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]chan error{"read": rd, "write": wr} {
		if err := <-ch; !errors.Is(err, net.ErrClosed) {
			t.Errorf("parked %s after Close: %v, want net.ErrClosed", name, err)
		}
	}
	if err := c.Conn.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
	client.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.Copy(io.Discard, client); err != nil {
		t.Errorf("peer after Close: %v, want EOF", err)
	}
}

// A write larger than the socket's buffer parks until the peer reads,
// and arrives whole; a write deadline ends a write the peer never reads,
// with what was written counted.
func TestConnWriteParksUntilRead(t *testing.T) {
	addr, conns, _ := connServer(t, "tcp")
	client := dialConn(t, "tcp", addr)
	c := <-conns
	msg := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	done := make(chan error, 1)
	go func() {
		_, err := c.Conn.Write(msg)
		done <- err
	}()
	got, err := io.ReadAll(io.LimitReader(client, int64(len(msg))))
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("peer read %d bytes (%v), want the %d written", len(got), err, len(msg))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The deadline is set once the write has parked (the socket's buffer
	// full, part of the write in it): set before, on a loaded machine it
	// could pass before the write began, which then rightly writes nothing.
	type result struct {
		n   int
		err error
	}
	wrote := make(chan result, 1)
	go func() {
		n, err := c.Conn.Write(make([]byte, 64<<20))
		wrote <- result{n, err}
	}()
	fc := c.Conn.(*fdConn)
	waitFor(t, "the write parks", func() bool { return fc.wr.parked.Load() })
	c.Conn.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
	r := <-wrote
	if !errors.Is(r.err, os.ErrDeadlineExceeded) || r.n <= 0 || r.n >= 64<<20 {
		t.Fatalf("write nobody reads: %d bytes, %v; want part of it and os.ErrDeadlineExceeded", r.n, r.err)
	}
}

// The addresses of a door's TCP connection are the client's, mirrored.
func TestConnAddrs(t *testing.T) {
	addr, conns, _ := connServer(t, "tcp")
	client := dialConn(t, "tcp", addr)
	c := <-conns
	if got, want := c.RemoteAddr().String(), client.LocalAddr().String(); got != want {
		t.Errorf("RemoteAddr %s, want %s", got, want)
	}
	if got, want := c.LocalAddr().String(), client.RemoteAddr().String(); got != want {
		t.Errorf("LocalAddr %s, want %s", got, want)
	}
	if _, ok := c.RemoteAddr().(*net.TCPAddr); !ok {
		t.Errorf("RemoteAddr is a %T", c.RemoteAddr())
	}
}

// Writes from several goroutines at once arrive whole, each in one piece.
func TestConnConcurrentWrites(t *testing.T) {
	addr, conns, _ := connServer(t, "unix")
	client := dialConn(t, "unix", addr)
	c := <-conns
	const writers, size = 8, 256 << 10 // each larger than the socket buffer
	errs := make(chan error, writers)
	for i := range writers {
		go func() {
			_, err := c.Conn.Write(bytes.Repeat([]byte{byte('a' + i)}, size))
			errs <- err
		}()
	}
	got, err := io.ReadAll(io.LimitReader(client, writers*size))
	if err != nil {
		t.Fatal(err)
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < len(got); i += size {
		if chunk := got[i : i+size]; !bytes.Equal(chunk, bytes.Repeat(chunk[:1], size)) {
			t.Fatalf("write %d of %d arrived interleaved with another", i/size+1, writers)
		}
	}
}
