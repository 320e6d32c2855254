package milter

import (
	"net"
	"path/filepath"
	"testing"

	"sluice/internal/milter/miltest"
	"sluice/internal/milter/wire"
	"sluice/internal/rawio"
)

// rioProbe records, at CONNECT, whether the session's connection does its
// packet I/O with raw syscalls.
type rioProbe struct {
	minimal
	raw chan bool
}

func (p *rioProbe) Connect(s *Session, _ string, _ Family, _ uint16, _ string) Response {
	p.raw <- s.c.rio != nil
	return Continue
}

// TestRawIOSessions: over unix and TCP sockets the engine reads and
// writes packets with raw syscalls where it can (Linux, not -race:
// internal/rawio), a whole session works that way, and with noRawIO
// through net.Conn as before.
func TestRawIOSessions(t *testing.T) {
	for _, tc := range []struct {
		network string
		noRaw   bool
	}{{"unix", false}, {"tcp", false}, {"unix", true}} {
		t.Run(tc.network+map[bool]string{true: "-noraw"}[tc.noRaw], func(t *testing.T) {
			h := &rioProbe{raw: make(chan bool, 1)}
			s := NewServer(Options{Handler: h, Logger: quiet()})
			s.noRawIO = tc.noRaw
			addr := "127.0.0.1:0"
			if tc.network == "unix" {
				addr = filepath.Join(t.TempDir(), "m")
			}
			l, err := net.Listen(tc.network, addr)
			if err != nil {
				t.Fatal(err)
			}
			served := make(chan error, 1)
			go func() { served <- s.Serve(l) }()
			defer func() {
				s.Close()
				<-served
			}()
			m, err := miltest.Dial(tc.network, l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			must(t, m.Negotiate(6, wire.AllActions, wire.AllProtocol))
			connect(t, m)
			if raw, want := <-h.raw, rawio.Supported && !tc.noRaw; raw != want {
				t.Fatalf("raw packet I/O: %v, want %v", raw, want)
			}
			c, err := m.Verdict(&wire.EOM{})
			wantCode(t, c, err, wire.RespContinue)
			must(t, m.Quit())
			eventually(t, func() bool { return h.closes.Load() == 1 }, "Close after QUIT")
		})
	}
}
