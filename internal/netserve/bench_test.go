package netserve

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
)

// benchServer serves echo (one line in, the same line out, until EOF) on
// a unix socket and returns its path.
func benchServer(b *testing.B) string {
	s := New(Options{Name: "bench", Logger: slog.New(slog.DiscardHandler)}, func(c *Conn) {
		r := bufio.NewReaderSize(c.Reader(), 256)
		for {
			line, err := r.ReadSlice('\n')
			if err != nil {
				return
			}
			if _, err := c.Write(line); err != nil {
				return
			}
			c.Done()
		}
	})
	path := filepath.Join(b.TempDir(), "s")
	l, err := net.Listen("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	go s.Serve(l)
	b.Cleanup(func() { s.Close(); s.Wait() })
	return path
}

// BenchmarkSession is one whole session: connect, one request and its
// answer, close (the door's accept, peer check, handler start, read,
// write and close; the client's side is in the figure too).
func BenchmarkSession(b *testing.B) {
	path := benchServer(b)
	buf := make([]byte, 16)
	b.ReportAllocs()
	for b.Loop() {
		c, err := net.Dial("unix", path)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write([]byte("ping\n")); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf[:5]); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}

// BenchmarkRequest is one request and its answer on an open session.
func BenchmarkRequest(b *testing.B) {
	path := benchServer(b)
	c, err := net.Dial("unix", path)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 16)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write([]byte("ping\n")); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf[:5]); err != nil {
			b.Fatal(err)
		}
	}
}
