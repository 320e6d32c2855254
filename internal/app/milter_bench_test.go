package app

import (
	"path/filepath"
	"testing"

	"sluice/internal/milter/miltest"
	"sluice/internal/milter/wire"
)

// BenchmarkMilterSession is what one SMTP session costs sluice with the
// class caps alone: a new milter connection, OPTNEG, CONNECT (a class
// slot taken), QUIT (the slot freed), as Postfix does per session.
func BenchmarkMilterSession(b *testing.B) {
	dir := b.TempDir()
	startDaemon(b, writeConfig(b, dir, milterConfig(dir, "")))
	benchMilterSession(b, filepath.Join(dir, "milter"))
}

func benchMilterSession(b *testing.B, sock string) {
	b.ReportAllocs()
	for b.Loop() {
		m, err := miltest.Dial("unix", sock)
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Negotiate(6, wire.AllActions, wire.AllProtocol); err != nil {
			b.Fatal(err)
		}
		if err := m.Macro(wire.CmdConnect, "j", "mx.example.org", "{daemon_name}", "smtpd"); err != nil {
			b.Fatal(err)
		}
		r, err := m.Command(&wire.Connect{Host: "client.example.net", Family: wire.FamilyInet, Port: 4711, Addr: "192.0.2.1"})
		if err != nil || r.Code() != wire.RespContinue {
			b.Fatal(r, err)
		}
		if err := m.Quit(); err != nil {
			b.Fatal(err)
		}
		m.Close()
	}
}
