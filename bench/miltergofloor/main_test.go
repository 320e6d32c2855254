package main

import (
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/bench/internal/gofloor"
	"sluice/internal/milter/miltest"
	"sluice/internal/milter/wire"
)

// start serves a floor on a socket in a temporary directory.
func start(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "gf.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- gofloor.Serve(l, answer) }()
	t.Cleanup(func() {
		l.Close()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return sock
}

// TestFloorSession: a Postfix-shaped CONNECT-only session, as the bench's
// MTA drives it: the negotiation leaves CONNECT and END-OF-MESSAGE with a
// reply, both answered CONTINUE, the macros and ABORT unanswered, and
// QUIT closes.
func TestFloorSession(t *testing.T) {
	m, err := miltest.Dial("unix", start(t))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Negotiate(6, wire.AllActions, wire.AllProtocol); err != nil {
		t.Fatal(err)
	}
	if m.Neg.Version != 6 || m.Neg.Actions != 0 || m.Neg.Protocol&wire.ProtoNoConnect != 0 {
		t.Fatalf("negotiated %+v", m.Neg)
	}
	// A packet larger than the reader's buffer, as Postfix's macros can be.
	if err := m.Macro(wire.CmdHelo, "{cert_subject}", strings.Repeat("x", 6000)); err != nil {
		t.Fatal(err)
	}
	if err := m.Macro(wire.CmdConnect, "j", "mx.example"); err != nil {
		t.Fatal(err)
	}
	code, err := m.Verdict(&wire.Connect{Host: "client.example", Family: wire.FamilyInet, Port: 25, Addr: "192.0.2.1"})
	if err != nil || code != wire.RespContinue {
		t.Fatalf("CONNECT answered %v, %v", code, err)
	}
	if err := m.Macro(wire.CmdEOM, "i", "QID"); err != nil {
		t.Fatal(err)
	}
	_, _, final, err := m.EOM()
	if err != nil || final.Code() != wire.RespContinue {
		t.Fatalf("END-OF-MESSAGE answered %v, %v", final, err)
	}
	if err := m.Abort(); err != nil {
		t.Fatal(err)
	}
	if err := m.Quit(); err != nil {
		t.Fatal(err)
	}
}

// TestFloorDropsBadLength: a packet of length 0 or above the bound ends
// the connection without an answer.
func TestFloorDropsBadLength(t *testing.T) {
	sock := start(t)
	for _, n := range []uint32{0, maxPacket + 1, 1 << 31} {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		var hdr [5]byte
		binary.BigEndian.PutUint32(hdr[:4], n)
		hdr[4] = 'O'
		if _, err := c.Write(hdr[:]); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if got, err := io.ReadAll(c); err != nil || len(got) != 0 {
			t.Errorf("length %d: read %q, %v; want the end of the stream", n, got, err)
		}
		c.Close()
	}
}
