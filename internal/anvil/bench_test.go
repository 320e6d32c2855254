package anvil

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
)

// BenchmarkDecode is the cost of parsing one request.
func BenchmarkDecode(b *testing.B) {
	req := []byte("request=recipient\nident=smtp:192.0.2.123\n\n")
	r := bytes.NewReader(nil)
	d := NewDecoder(r, 0)
	b.ReportAllocs()
	b.SetBytes(int64(len(req)))
	for b.Loop() {
		r.Reset(req)
		d.r.Reset(r)
		if _, err := d.Decode(); err != nil {
			b.Fatal(err)
		}
	}
}

type nopSession struct{}

func (nopSession) Connect(context.Context, string) (int64, int64, error) { return 1, 1, nil }
func (nopSession) Disconnect(context.Context, string) error              { return nil }
func (nopSession) Event(context.Context, Request, string) (int64, error) { return 1, nil }
func (nopSession) NewTLSStatus(context.Context, string) (int64, error)   { return 0, nil }
func (nopSession) Lookup(context.Context, string) (Counts, error)        { return Counts{}, nil }
func (nopSession) Holding() bool                                         { return false }
func (nopSession) Close()                                                {}
func (nopSession) NewSession(int) Session                                { return nopSession{} }

// BenchmarkRoundTrip is one request and reply over a unix socket, with a
// handler that does nothing: the server's own cost per request.
func BenchmarkRoundTrip(b *testing.B) {
	s := NewServer(Options{Handler: nopSession{}, Logger: slog.New(slog.DiscardHandler)})
	l, err := net.Listen("unix", filepath.Join(b.TempDir(), "a"))
	if err != nil {
		b.Fatal(err)
	}
	go s.Serve(l)
	defer s.Close()
	c, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 64)
	if _, err := io.ReadFull(c, buf[:len(Announcement)]); err != nil {
		b.Fatal(err)
	}
	req := []byte("request=message\nident=smtp:192.0.2.123\n\n")
	want := len("status=0\nrate=1\n\n")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf[:want]); err != nil {
			b.Fatal(err)
		}
	}
}
