package muxctl

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestLine(t *testing.T) {
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"status"}, "status\n"},
		{[]string{"load1", "60"}, "load1 60\n"},
		{[]string{"load1 60"}, "load1%2060\n"},
		{[]string{"", ""}, " \n"},
		{[]string{"x", "a%b"}, "x a%25b\n"},
	} {
		if got := Line(c.words); got != c.want {
			t.Errorf("Line(%q) = %q, want %q", c.words, got, c.want)
		}
	}
	// At the limit: a word that does not fit is cut, never inside a %XX,
	// and a full line has no newline.
	long := strings.Repeat("a", MaxLine+10)
	if got := Line([]string{long}); got != long[:MaxLine-1] {
		t.Errorf("Line(long word): %d bytes, ends %q", len(got), got[len(got)-3:])
	}
	near := strings.Repeat("a", MaxLine-5)
	got := Line([]string{near + "%%%"})
	if got != near+"%25\n" {
		t.Errorf("Line(near the limit + %%%%%%) ends %q (%d bytes)", got[len(got)-6:], len(got))
	}
	got = Line([]string{near, "bbbbbbbb"})
	if got != near+" bbb" {
		t.Errorf("Line(two words over the limit) ends %q (%d bytes)", got[len(got)-6:], len(got))
	}
}

func TestScan(t *testing.T) {
	v, n := scan([]byte("  12 -3.5e2\n+7 inf -nan 99999999999 4294967297x"), "dfdffdd")
	if n != 7 {
		t.Fatalf("converted %d, want 7: %v", n, v)
	}
	if v[0] != 12 || v[1] != -350 || v[2] != 7 || !math.IsInf(v[3], 1) || !math.IsNaN(v[4]) || !math.Signbit(v[4]) {
		t.Errorf("values %v", v)
	}
	// A C int keeps the low 32 bits of strtol's value.
	big := int64(99999999999)
	if v[5] != float64(int32(big)) || v[6] != 1 {
		t.Errorf("int overflow: %v %v", v[5], v[6])
	}
	if v, n := scan([]byte("1 2 x 4"), "dddd"); n != 2 || v[2] != 0 || v[3] != 0 {
		t.Errorf("stops at the first failure: %v %d", v, n)
	}
	if _, n := scan(nil, "d"); n != 0 {
		t.Errorf("empty: %d", n)
	}
	if v, n := scan([]byte("1-2.5.5"), "dff"); n != 3 || v[1] != -2.5 || v[2] != 0.5 {
		t.Errorf("no space needed between numbers: %v %d", v, n)
	}
}

func TestCfloat(t *testing.T) {
	zero := 0.0
	for _, c := range []struct {
		f    float64
		want string
	}{
		{1.005, "   1.00"}, // the binary value is below 1.005
		{2.5, "   2.50"},
		{math.Inf(1), "    inf"},
		{math.Inf(-1), "   -inf"},
		{zero / zero, "   -nan"}, // the x86 default NaN, as C prints it
		{math.NaN(), "    nan"},
		{math.Copysign(0, -1), "  -0.00"},
	} {
		if got := cfloat(7, 2, c.f); got != c.want {
			t.Errorf("cfloat(%v) = %q, want %q", c.f, got, c.want)
		}
	}
}

// serve answers each connection on a fresh socket with handle.
func serve(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			handle(c)
			c.Close()
		}
	}()
	return sock
}

func readLine(c net.Conn) string {
	var b []byte
	one := make([]byte, 1)
	for {
		if _, err := c.Read(one); err != nil {
			return string(b)
		}
		b = append(b, one[0])
		if one[0] == '\n' {
			return string(b)
		}
	}
}

func TestExchange(t *testing.T) {
	ctx := context.Background()
	got := make(chan string, 1)
	sock := serve(t, func(c net.Conn) {
		got <- readLine(c)
		c.Write([]byte("IIS 0 2 0 0 4\n"))
	})
	cl := &Client{Socket: sock}
	reply, err := cl.Exchange(ctx, "status\n", 100)
	if err != nil || string(reply) != "IIS 0 2 0 0 4\n" || <-got != "status\n" {
		t.Fatalf("reply %q, err %v", reply, err)
	}
	reply, err = cl.Exchange(ctx, "x\n", 5)
	if err != nil || string(reply) != "IIS 0" {
		t.Errorf("at most max bytes: %q %v", reply, err)
	}
	<-got
}

func TestExchangeErrors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	missing := &Client{Socket: filepath.Join(dir, "none")}
	_, err := missing.Exchange(ctx, "status\n", 10)
	if !errors.Is(err, syscall.ENOENT) || Message(err) != "ERROR MXCommand: connect: No such file or directory: Is multiplexor running?" {
		t.Errorf("missing socket: %v / %q", err, Message(err))
	}
	if _, err := (&Client{}).Exchange(ctx, "status\n", 10); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("empty path: %v", err)
	}

	// A server that reads the request and never answers: the timeout, not
	// a hang.
	release := make(chan struct{})
	silent := serve(t, func(c net.Conn) { readLine(c); <-release })
	silent2 := serve(t, func(c net.Conn) { readLine(c); <-release })
	t.Cleanup(func() { close(release) }) // before the servers' cleanups
	_, err = (&Client{Socket: silent, Timeout: 50 * time.Millisecond}).Exchange(ctx, "status\n", 10)
	if !errors.Is(err, os.ErrDeadlineExceeded) ||
		Message(err) != "ERROR MXCommand: read: Connection timed out: Is multiplexor running?" {
		t.Errorf("silent server: %v / %q", err, Message(err))
	}

	// Cancelling the context ends the exchange too.
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(20*time.Millisecond, cancel)
	if _, err = (&Client{Socket: silent2}).Exchange(cctx, "status\n", 10); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}

	// A server that closes without reading: the unread request makes the
	// kernel reset the connection.
	closer := serve(t, func(c net.Conn) {
		one := make([]byte, 1)
		_, _ = io.ReadFull(c, one)
	})
	_, err = (&Client{Socket: closer}).Exchange(ctx, "status\n", 10)
	if !errors.Is(err, syscall.ECONNRESET) ||
		Message(err) != "ERROR MXCommand: read: Connection reset by peer: Is multiplexor running?" {
		t.Errorf("closing server: %v / %q", err, Message(err))
	}
}

func TestRunFormatsOddReplies(t *testing.T) {
	ctx := context.Background()
	reply := make(chan string, 1)
	sock := serve(t, func(c net.Conn) {
		readLine(c)
		c.Write([]byte(<-reply))
	})
	cl := &Client{Socket: sock}
	for _, c := range []struct {
		line, reply, out, errs string
		code                   int
	}{
		{"status\n", "", "", "ERROR ", 1},
		{"status\n", "error: oops\n", "", "ERROR error: oops\n", 1},
		{"status\n", "IB\n", "Max workers: 3\nWorker 0: idle\nWorker 1: busy\nWorker 2: unknown state '\n'\n", "", 0},
		{"barstatus\n", strings.Repeat("B", 30) + strings.Repeat("I", 70) + " 5 1 30 7 9\n",
			" 30/100 BBBBBBBB.................    7/30 QQQQQ............... 5\n", "", 0},
		{"barstatus\n", "BIS 12\n", "  1/3 B.. 12\n", "", 0},
		{"load1 60\n", "error: no\n", "Could not interpret response: error: no\n", "", 1},
		{"load\n", "", "  Load              Msgs        Msgs/Sec     Avg ms/Scan   Avg Busy Workers\n" +
			"10 Sec               0            0.00             0.0            0.00\n" +
			" 1 Min               0            0.00             0.0            0.00\n" +
			" 5 Min               0            0.00             0.0            0.00\n" +
			"10 Min               0            0.00             0.0            0.00\n", "", 0},
		{"anything\n", "a%20b%00c", "a b\n", "", 0},
		{"rawstatus\n", "a%20b", "a%20b\n", "", 0},
		{"anything\n", "", "", "", 0},
	} {
		reply <- c.reply
		var out, errs bytes.Buffer
		code := cl.Run(ctx, c.line, &out, &errs)
		if code != c.code || out.String() != c.out || errs.String() != c.errs {
			t.Errorf("%q with reply %q: %d\n%q\n%q\nwant %d\n%q\n%q", c.line, c.reply, code, out.String(), errs.String(), c.code, c.out, c.errs)
		}
	}
}
