package throttle

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParse(t *testing.T) {
	if k, err := ParseRequest("ACQUIRE outgoing.verizon.net"); err != nil || k != "outgoing.verizon.net" {
		t.Fatalf("%q %v", k, err)
	}
	bad := map[string]string{
		"":                                    "want \"ACQUIRE <key>\"",
		"GET x":                               "want \"ACQUIRE <key>\"",
		"ACQUIRE ":                            "key must be 1 to 255 bytes",
		"ACQUIRE a b":                         "space or non-printable",
		"ACQUIRE a\x00":                       "space or non-printable",
		"ACQUIRE " + strings.Repeat("k", 300): "key must be 1 to 255 bytes",
	}
	for in, want := range bad {
		if _, err := ParseRequest(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseRequest(%q) = %v, want %q", in, err, want)
		}
	}
	if r, err := ParseReply("OK 1700000000123456789"); err != nil || r.At.UnixNano() != 1700000000123456789 {
		t.Fatalf("%v %v", r, err)
	}
	if r, err := ParseReply("DEFER no slot within 10m"); err != nil || r.Defer != "no slot within 10m" {
		t.Fatalf("%v %v", r, err)
	}
	if r, err := ParseReply("OK 1700000000123456789 1700000000248456789"); err != nil || r.Latest.UnixNano() != 1700000000248456789 {
		t.Fatalf("OK with latest: %v %v", r, err)
	}
	if r, err := ParseReply("OK 1700000000123456789"); err != nil || !r.Latest.IsZero() {
		t.Fatalf("OK without latest (an older server): %v %v", r, err)
	}
	at, latest := time.Unix(0, 1700000000123456789), time.Unix(0, 1700000000248456789)
	for _, l := range []time.Time{latest, {}} {
		if r, err := ParseReply(strings.TrimSuffix(FormatOK(at, l), "\n")); err != nil || !r.At.Equal(at) || !r.Latest.Equal(l) {
			t.Errorf("FormatOK(%v, %v) does not read back: %v %v", at, l, r, err)
		}
	}
	for _, in := range []string{"OK soon", "WAIT 5", "ERR bad key", "OK 5 x", "OK 5 4", "OK 5 6 7"} {
		if _, err := ParseReply(in); err == nil {
			t.Errorf("ParseReply(%q) accepted", in)
		}
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add("ACQUIRE relay.example")
	f.Add("ACQUIRE \xff")
	f.Fuzz(func(t *testing.T, line string) {
		if k, err := ParseRequest(line); err == nil && CheckKey(k) != nil {
			t.Fatalf("accepted bad key %q", k)
		}
		ParseReply(line)
	})
}

// gate is a Handler whose grants are controlled by the test.
type gate struct {
	at      time.Time
	deferIt bool
	block   bool
	waiting atomic.Int64 // Acquire calls blocked (block)
	done    atomic.Int64
	gone    atomic.Int64
}

func (g *gate) Acquire(ctx context.Context, key string) (Grant, error) {
	if g.deferIt {
		return Grant{}, &DeferError{Reason: "no slot for " + key + " within 1m"}
	}
	if g.block {
		g.waiting.Add(1)
		<-ctx.Done()
		g.gone.Add(1)
		return Grant{}, ctx.Err()
	}
	return Grant{At: g.at, Done: func(used bool) {
		if used {
			g.done.Add(1)
		} else {
			g.gone.Add(1)
		}
	}}, nil
}

func serve(t *testing.T, h Handler) string {
	t.Helper()
	s := NewServer(Options{Handler: h, Logger: slog.New(slog.DiscardHandler), RequestTimeout: 200 * time.Millisecond})
	path := filepath.Join(t.TempDir(), "throttle")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		<-done
	})
	return path
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 5000 {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestGrantHeldUntilClose(t *testing.T) {
	g := &gate{at: time.Unix(1700000000, 5)}
	path := serve(t, g)
	cl, err := Dial("unix", path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := cl.Acquire("relay.example")
	if err != nil || !rep.At.Equal(g.at) {
		t.Fatalf("%v %v", rep, err)
	}
	time.Sleep(20 * time.Millisecond)
	if g.done.Load() != 0 {
		t.Fatal("grant ended while the sender still holds it")
	}
	cl.Done()
	waitFor(t, func() bool { return g.done.Load() == 1 })
	// A sender that closes without DONE did not use its slot.
	cl2, _ := Dial("unix", path, time.Second)
	cl2.Acquire("relay.example")
	cl2.Close()
	waitFor(t, func() bool { return g.gone.Load() == 1 })
}

func TestDeferAndErrors(t *testing.T) {
	path := serve(t, &gate{deferIt: true})
	cl, _ := Dial("unix", path, time.Second)
	defer cl.Close()
	if rep, err := cl.Acquire("relay.example"); err != nil || rep.Defer != "no slot for relay.example within 1m" {
		t.Fatalf("%v %v", rep, err)
	}
	for _, bad := range []string{"HELLO\n", "ACQUIRE a b\n", strings.Repeat("x", 600) + "\n"} {
		c, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, bad)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if !strings.HasPrefix(line, "ERR ") {
			t.Errorf("%.20q: got %q, want ERR", bad, line)
		}
	}
	// A client that never sends its request is cut off.
	c, _ := net.Dial("unix", path)
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("silent client: %v, want EOF", err)
	}
}

// TestShutdownKeepsGrantedSlots: a shutdown closes the connections of
// senders that were told their time, but they send at it anyway: the
// slot is kept (used), not given back.
func TestShutdownKeepsGrantedSlots(t *testing.T) {
	g := &gate{at: time.Now().Add(time.Hour)}
	s := NewServer(Options{Handler: g, Logger: slog.New(slog.DiscardHandler)})
	path := filepath.Join(t.TempDir(), "throttle")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	cl, err := Dial("unix", path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if rep, err := cl.Acquire("relay.example"); err != nil || !rep.At.Equal(g.at) {
		t.Fatalf("%v %v", rep, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	<-done
	if g.done.Load() != 1 || g.gone.Load() != 0 {
		t.Fatalf("after shutdown: %d slots kept, %d given back; want the granted slot kept", g.done.Load(), g.gone.Load())
	}
}

func TestWaiterGoingAwayLeavesLine(t *testing.T) {
	g := &gate{block: true}
	path := serve(t, g)
	cl, _ := Dial("unix", path, time.Second)
	errc := make(chan error, 1)
	go func() { _, err := cl.Acquire("relay.example"); errc <- err }()
	waitFor(t, func() bool { return g.waiting.Load() == 1 }) // in line
	cl.Close()
	<-errc
	waitFor(t, func() bool { return g.gone.Load() == 1 })
}
