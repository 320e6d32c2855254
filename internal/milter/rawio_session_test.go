package milter

import (
	"net"
	"os"
	"path/filepath"
	"testing"

	"sluice/internal/milter/miltest"
	"sluice/internal/milter/wire"
)

// rioProbe records, at CONNECT, what the session knows of its
// connection: the MTA's pid (unix sockets) and whether TCP_QUICKACK can be
// re-armed on it (TCP).
type rioProbe struct {
	minimal
	raw chan [2]bool
}

func (p *rioProbe) Connect(s *Session, _ string, _ Family, _ uint16, _ string) Response {
	p.raw <- [2]bool{s.c.pid == os.Getpid(), s.c.raw != nil}
	return Continue
}

// TestRawIOSessions: over unix and TCP sockets a whole session runs on
// the door's connections (internal/netserve's poller, raw system calls),
// and what the engine asks of the descriptor works on them: the peer's
// pid by SO_PEERCRED on a unix socket, TCP_QUICKACK on TCP.
func TestRawIOSessions(t *testing.T) {
	for _, tc := range []struct {
		network string
		want    [2]bool
	}{{"unix", [2]bool{true, false}}, {"tcp", [2]bool{false, quickAckSupported}}} {
		t.Run(tc.network, func(t *testing.T) {
			h := &rioProbe{raw: make(chan [2]bool, 1)}
			s := NewServer(Options{Handler: h, Logger: quiet()})
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
			if got := <-h.raw; got != tc.want {
				t.Fatalf("[peer pid is ours, quickack armed] = %v, want %v", got, tc.want)
			}
			c, err := m.Verdict(&wire.EOM{})
			wantCode(t, c, err, wire.RespContinue)
			must(t, m.Quit())
			eventually(t, func() bool { return h.closes.Load() == 1 }, "Close after QUIT")
		})
	}
}
