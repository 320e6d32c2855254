package milter

import (
	"context"

	"sluice/internal/milter/wire"
)

// macro slots, in stage order; a MACRO packet for one stage clears the
// later ones (as libmilter does), ABORT and EOM clear the message's.
const (
	slotConnect = iota
	slotHelo
	slotMail
	slotRcpt
	slotData
	slotHeader
	slotEOH
	slotBody
	slotEOM
	slotUnknown // UNKNOWN can come between any two stages; kept apart
	numSlots
)

func macroSlot(cmd wire.Code) int {
	switch cmd {
	case wire.CmdConnect:
		return slotConnect
	case wire.CmdHelo:
		return slotHelo
	case wire.CmdMail:
		return slotMail
	case wire.CmdRcpt:
		return slotRcpt
	case wire.CmdData:
		return slotData
	case wire.CmdHeader:
		return slotHeader
	case wire.CmdEOH:
		return slotEOH
	case wire.CmdBody:
		return slotBody
	case wire.CmdEOM:
		return slotEOM
	case wire.CmdUnknown:
		return slotUnknown
	}
	return -1
}

// Session is one connection-level milter session: one SMTP session as
// the MTA reports it, from the accepted connection (or the QUIT_NC that
// ended the previous Session on the same connection) to QUIT, QUIT_NC or
// the end of the connection. It holds several messages.
//
// A Session is data, not a goroutine. Its methods may be called from the
// Handler's callbacks (and only from them, or after Close returned).
type Session struct {
	// Data is the handler's own per-session value. Callbacks of one
	// Session never run concurrently, so it needs no lock.
	Data any

	id     uint64
	c      *conn
	macros [numSlots]wire.MacroList
}

// ID returns a number unique to the session within its Server.
func (s *Session) ID() uint64 { return s.id }

// PeerPID returns the process at the other end of the connection when it
// came over a unix socket (SO_PEERCRED; Postfix: the smtpd process whose
// SMTP session this is), else 0.
func (s *Session) PeerPID() int { return s.c.pid }

// Context returns the server's context: it is cancelled when the server
// is closed or a Shutdown's deadline passes.
func (s *Session) Context() context.Context { return s.c.srv.ctx }

// KeptContext returns the server's context without its cancellation, for
// what must finish even while the server stops (releasing what the
// session holds). It is made once per server, not per call.
func (s *Session) KeptContext() context.Context { return s.c.srv.kept }

// Macro returns the value of a Sendmail macro ("i", "{auth_authen}"; the
// braces may be left out) from the latest stage that defined it: a
// stage's macros stay until the next MACRO packet for the same or an
// earlier stage, and the message's go at its end (EOM or ABORT).
// Connect-stage macros last the whole session.
func (s *Session) Macro(name string) (string, bool) {
	want := trimBraces(name)
	for slot := slotEOM; slot >= slotConnect; slot-- {
		if v, ok := lookup(s.macros[slot], want); ok {
			return v, true
		}
	}
	return lookup(s.macros[slotUnknown], want)
}

func lookup(l wire.MacroList, want string) (string, bool) {
	for name, value := range l.All() {
		if trimBraces(name) == want {
			return value, true
		}
	}
	return "", false
}

func trimBraces(name string) string {
	if len(name) > 2 && name[0] == '{' && name[len(name)-1] == '}' {
		return name[1 : len(name)-1]
	}
	return name
}

// setMacros stores a MACRO packet and clears the later stages.
func (s *Session) setMacros(cmd wire.Code, l wire.MacroList) {
	slot := macroSlot(cmd)
	if slot < 0 {
		return // a macro packet for an unknown command: tolerated, unused
	}
	s.macros[slot] = l
	if slot != slotUnknown {
		for later := slot + 1; later < slotUnknown; later++ {
			s.macros[later] = ""
		}
	}
}

// endMessage drops the message's macros.
func (s *Session) endMessage() {
	for slot := slotMail; slot < slotUnknown; slot++ {
		s.macros[slot] = ""
	}
}
