package mux

import (
	"bytes"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/pool"
	"sluice/internal/rawio"
)

// TestFrameLine: the reference's framing of what a request read received.
func TestFrameLine(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"status\n", "status"},
		{"status\r\n", "status"},
		{"status\r\r\n", "status\r"},
		{"stat\x00us\n", "stat"},
		{"status", "statu"}, // EOF without a newline: the last byte goes
		{"\n", ""},
		{"", ""},
		{"\r\n", ""},
		{"\x00\n", ""},
	} {
		if got := frameLine([]byte(tc.in)); got != tc.want {
			t.Errorf("frameLine(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestForwardedKindsAreNotBuiltin: what Serve forwards itself is never a
// command the multiplexor answers itself.
func TestForwardedKindsAreNotBuiltin(t *testing.T) {
	s := New(Options{})
	for k := pool.Scan; k <= pool.RecipOK; k++ {
		line := k.Name() + " a b c"
		if !forwardsAtOnce(line) {
			t.Errorf("%q is not forwarded at once", line)
		}
		if _, ok := s.lookupBuiltin(line, true); ok {
			t.Errorf("%q is a built-in command", line)
		}
	}
	builtins := []string{"help", "free", "version", "tick", "status", "slaves", "workers", "busyslaves",
		"busyworkers", "load", "load1 10", "load-relayok", "load-senderok", "load-recipok", "hload",
		"hload-relayok", "histo", "msgs", "foo_no_such_command", "slaveinfo 0", "workerinfo 0"}
	for _, line := range builtins {
		if _, ok := s.lookupBuiltin(line, true); !ok {
			t.Errorf("%q is not a built-in command", line)
		}
	}
	for _, line := range append(builtins, "scan", "relayok", "reread", "autoscale", strings.Repeat("scan ", 1000)) {
		if forwardsAtOnce(line) {
			t.Errorf("%q is forwarded at once", line)
		}
	}
}

// TestFinishLater: a reply the client's socket does not take at once is
// written by a goroutine as the client reads, then the connection closes.
func TestFinishLater(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		t.Fatal(err)
	}
	client := os.NewFile(uintptr(fds[1]), "client")
	defer client.Close()
	// Fill the server side's buffer, as a client that does not read.
	var filled int
	chunk := bytes.Repeat([]byte{'f'}, 4096)
	for {
		n, e := rawio.WriteFD(fds[0], chunk)
		if e == syscall.EAGAIN {
			break
		}
		if e != 0 {
			t.Fatal(e)
		}
		filled += n
	}
	s := New(Options{Timeout: 10 * time.Second})
	s.write(fds[0], []byte("ok 1 ok 250 2.1.0 0\n"), true)
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(client)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != filled+len("ok 1 ok 250 2.1.0 0\n") || !strings.HasSuffix(string(b), "fok 1 ok 250 2.1.0 0\n") {
		t.Fatalf("client read %d bytes ending %q, want %d then the reply", len(b), b[max(0, len(b)-30):], filled)
	}
	s.Close()
}

// TestAppendStatus: the status reply (the reference's format), appended
// to a reused buffer without an allocation.
func TestAppendStatus(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	sn := &pool.Snapshot{
		Start: start, Now: start.Add(42 * time.Second), Msgs: 1234, Activations: 7, QueueSize: 128, Queued: 3,
		Slots: []pool.SlotInfo{{State: pool.Idle}, {State: pool.Busy}, {State: pool.Killed}, {State: pool.Stopped}},
	}
	const want = "IBKS 1234 7 128 3 42\n"
	if got := string(appendStatus(nil, sn)); got != want {
		t.Fatalf("status %q, want %q", got, want)
	}
	b := make([]byte, 0, 64)
	if n := testing.AllocsPerRun(100, func() { b = appendStatus(b[:0], sn) }); n != 0 {
		t.Fatalf("appendStatus into a buffer: %v allocations, want 0", n)
	}
}

// timeoutConn is a clientConn that records the read timeout it is given
// and whose reads time out.
type timeoutConn struct {
	rto   time.Duration
	reads int
}

func (c *timeoutConn) Read([]byte) (int, error)       { c.reads++; return 0, os.ErrDeadlineExceeded }
func (c *timeoutConn) Write(b []byte) (int, error)    { return len(b), nil }
func (c *timeoutConn) setReadTimeout(d time.Duration) { c.rto = d }
func (c *timeoutConn) setWriteTimeout(time.Duration)  {}

// TestServeSpentTimeout: a connection handed off after a wait on the
// owner reads under what is left of the timeout, not a whole new one;
// with nothing left it is closed without a read.
func TestServeSpentTimeout(t *testing.T) {
	s := New(Options{Timeout: time.Second})
	defer s.Close()
	c := &timeoutConn{}
	s.serve(c, true, new(reqBuf), inline{pre: []byte("stat"), spent: 300 * time.Millisecond})
	if c.rto != 700*time.Millisecond || c.reads == 0 {
		t.Fatalf("read timeout %v after %d reads, want 700ms", c.rto, c.reads)
	}
	c = &timeoutConn{}
	s.serve(c, true, new(reqBuf), inline{spent: time.Second})
	if c.reads != 0 {
		t.Fatalf("%d reads with the whole timeout spent, want none", c.reads)
	}
}
