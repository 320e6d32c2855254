package milter

import (
	"net"
	"os"
	"testing"
	"time"

	"sluice/internal/milter/wire"
)

// connectOnly implements CONNECT and EOM only: every step between them
// is negotiated away, which is what exposes the delayed-ACK stall.
type connectOnly struct{ minimal }

func (*connectOnly) EOM(*Session, *Modifier) Response { return Accept }

// TestDelayedACKStall runs 200 transactions the way Postfix drives a
// CONNECT+EOM-only milter (docs/protocols/milter.md, "Delayed ACK"): Nagle on at the MTA
// side, and several small reply-less packets written one after another
// (macros, EOM, ABORT, QUIT_NC) between the two replies.
//
// The bound is a bug detector, not a performance threshold: with the
// stall, each transaction waits for the milter's delayed ACK, at least
// 40 ms on Linux (TCP_DELACK_MIN), so 200 transactions take >= 8 s; the
// test allows 2 s, a quarter of the stall's signature, while a working
// engine needs a few milliseconds per transaction even on a loaded
// machine. Set MILTER_SHOW_STALL=1 to turn the engine's fix off and see
// the test fail.
func TestDelayedACKStall(t *testing.T) {
	const n = 200
	s, addr := start(t, Options{Handler: &connectOnly{}})
	if os.Getenv("MILTER_SHOW_STALL") != "" {
		s.noQuickAck = true
	}
	m := dial(t, addr)
	must(t, m.Conn.(*net.TCPConn).SetNoDelay(false)) // the MTA's side has Nagle on
	must(t, m.Negotiate(6, wire.AllActions, wire.AllProtocol))
	if off := wire.ProtoNoHelo | wire.ProtoNoMail | wire.ProtoNoRcpt | wire.ProtoNoData | wire.ProtoNoHeaders |
		wire.ProtoNoEOH | wire.ProtoNoBody; m.Neg.Protocol&off != off {
		t.Fatalf("steps not negotiated off: %v", m.Neg.Protocol)
	}
	begin := time.Now()
	for i := range n {
		must(t, m.Macro(wire.CmdConnect, "j", "mx"))
		c, err := m.Verdict(&wire.Connect{Host: "h", Family: wire.FamilyInet, Port: 25, Addr: "192.0.2.1"})
		wantCode(t, c, err, wire.RespContinue)
		must(t, m.Macro(wire.CmdMail, "{mail_addr}", "a@example.org"))
		must(t, m.Macro(wire.CmdRcpt, "{rcpt_addr}", "b@example.org"))
		must(t, m.Macro(wire.CmdEOM, "i", "QID"))
		_, _, final, err := m.EOM()
		must(t, err)
		if final.Code() != wire.RespAccept {
			t.Fatalf("transaction %d: %v", i, final.Code())
		}
		must(t, m.Abort())
		must(t, m.QuitNC())
	}
	elapsed := time.Since(begin)
	t.Logf("%d transactions in %v (%v each)", n, elapsed, elapsed/n)
	if limit := n * 40 * time.Millisecond / 4; elapsed > limit {
		t.Fatalf("%d transactions took %v (> %v): the delayed-ACK stall is back", n, elapsed, limit)
	}
}
