package milter

import (
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/internal/milter/miltest"
	"sluice/internal/milter/wire"
	"sluice/internal/testutil/logbuf"
)

// TestBadLengthAlone: a packet whose 4-byte length is zero (or over
// MaxData) is malformed before its code byte arrives; the engine must not
// wait for that byte. The MTA side sends the 4 length bytes alone, before
// or after a valid OPTNEG, and keeps the connection open: the server logs
// one line naming the malformed packet and closes the connection, with
// the session's Close callback. The idle and request timeouts are off, so
// only the length can end the session; the read deadline below is a guard
// against a hang, not a measure. Run over TCP and unix sockets;
// scripts/test.sh runs this package with and without -race.
func TestBadLengthAlone(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		for _, c := range []struct {
			name   string
			optneg bool
			length []byte
			want   string
		}{
			{"zero first", false, []byte{0, 0, 0, 0}, "malformed packet: zero length"},
			{"zero after OPTNEG", true, []byte{0, 0, 0, 0}, "malformed packet: zero length"},
			{"over the cap after OPTNEG", true, []byte{0, 0, 0x10, 0}, "packet too large: payload of 4095 bytes, cap 1024"},
		} {
			t.Run(network+"/"+c.name, func(t *testing.T) {
				badLengthAlone(t, network, c.optneg, c.length, c.want)
			})
		}
	}
}

// badLengthAlone is one case of TestBadLengthAlone.
func badLengthAlone(t *testing.T, network string, optneg bool, length []byte, want string) {
	logs := &logbuf.Buffer{}
	rec := newRecorder()
	s := NewServer(Options{Handler: rec, Logger: slog.New(slog.NewTextHandler(logs, nil)), MaxData: 1024,
		IdleTimeout: -1, RequestTimeout: -1})
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "m")
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	defer func() {
		s.Close()
		<-served
	}()
	m, err := miltest.Dial(network, l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if optneg {
		must(t, m.Negotiate(6, wire.AllActions, wire.AllProtocol))
	}
	_, err = m.Conn.Write(length)
	must(t, err)
	_ = m.Conn.SetReadDeadline(time.Now().Add(20 * time.Second)) // a guard against a hang
	rest, err := io.ReadAll(m.Conn)
	if err != nil {
		t.Fatalf("the session was not closed after the length %x: %v; log:\n%s", length, err, logs.String())
	}
	if len(rest) != 0 {
		t.Errorf("the server answered %x", rest)
	}
	rec.waitClosed(t, 1)
	var lines []string
	for _, line := range strings.Split(strings.TrimSuffix(logs.String(), "\n"), "\n") {
		if line != "" {
			lines = append(lines, line)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "protocol error") || !strings.Contains(lines[0], want) {
		t.Errorf("log %q, want one warning with %q", lines, want)
	}
}
