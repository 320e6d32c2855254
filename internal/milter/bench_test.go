package milter

import (
	"testing"

	"sluice/internal/milter/wire"
)

// BenchmarkMessage runs one full message per iteration (MAIL, RCPT,
// DATA, two headers, EOH, a 2 KB body chunk, EOM with a header added,
// ABORT) on one session over loopback TCP, every step answered; the
// session (connection, negotiation, CONNECT) is opened once, before the
// loop.
func BenchmarkMessage(b *testing.B) {
	rec := newRecorder()
	rec.eom = func(s *Session, m *Modifier) Response {
		if err := m.AddHeader("X-Sluice", "ok"); err != nil {
			b.Error(err)
		}
		return Accept
	}
	quietRec := &quietHandler{rec}
	_, addr := start(b, Options{Handler: quietRec, Actions: wire.ActAddHeader})
	m := dial(b, addr)
	must(b, m.Negotiate(6, wire.AllActions, wire.AllProtocol))
	connect(b, m)
	body := string(make([]byte, 2000))
	b.ReportAllocs()
	for b.Loop() {
		mods, final, err := m.Message("<a@example.org>", "<b@example.net>", []string{"From", "a", "Subject", "b"}, body)
		if err != nil || len(mods) != 1 || final.Code() != wire.RespAccept {
			b.Fatal(mods, final, err)
		}
		if err := m.Abort(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkConnectOnly runs the governor's transaction per iteration:
// CONNECT and EOM answered, the steps between negotiated away, macros,
// ABORT and QUIT_NC unanswered (see TestDelayedACKStall).
func BenchmarkConnectOnly(b *testing.B) {
	_, addr := start(b, Options{Handler: &connectOnly{}})
	m := dial(b, addr)
	must(b, m.Negotiate(6, wire.AllActions, wire.AllProtocol))
	b.ReportAllocs()
	for b.Loop() {
		must(b, m.Macro(wire.CmdConnect, "j", "mx"))
		c, err := m.Verdict(&wire.Connect{Host: "h", Family: wire.FamilyInet, Port: 25, Addr: "192.0.2.1"})
		wantCode(b, c, err, wire.RespContinue)
		must(b, m.Macro(wire.CmdEOM, "i", "QID"))
		if _, _, final, err := m.EOM(); err != nil || final.Code() != wire.RespAccept {
			b.Fatal(final, err)
		}
		must(b, m.Abort())
		must(b, m.QuitNC())
	}
}

// quietHandler is a recorder that does not keep the events.
type quietHandler struct{ *recorder }

func (q *quietHandler) Connect(*Session, string, Family, uint16, string) Response { return Continue }
func (q *quietHandler) Helo(*Session, string) Response                            { return Continue }
func (q *quietHandler) MailFrom(*Session, string, []string) Response              { return Continue }
func (q *quietHandler) RcptTo(*Session, string, []string) Response                { return Continue }
func (q *quietHandler) Data(*Session) Response                                    { return Continue }
func (q *quietHandler) Header(*Session, string, string) Response                  { return Continue }
func (q *quietHandler) EOH(*Session) Response                                     { return Continue }
func (q *quietHandler) Body(*Session, []byte) Response                            { return Continue }
func (q *quietHandler) Abort(*Session)                                            {}
func (q *quietHandler) Close(*Session)                                            {}
