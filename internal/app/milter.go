package app

import (
	"context"
	"net/netip"
	"strconv"
	"strings"

	"sluice/internal/config"
	"sluice/internal/governor"
	"sluice/internal/milter"
	"sluice/internal/milter/wire"
)

// milterSession is what the daemon keeps per milter session.
type milterSession struct {
	gov  *governor.Governor // the rules in force when the session began
	ms   governor.MilterSession
	size int64 // header and body bytes of the current message
}

// milterConnect is the milter handler when only the class caps apply: the
// MTA is asked for CONNECT alone, every other step is negotiated off, so
// a session costs one round trip.
type milterConnect struct{ d *Daemon }

func (h milterConnect) Connect(s *milter.Session, host string, family milter.Family, port uint16, addr string) milter.Response {
	ss := &milterSession{gov: h.d.gov.Load()}
	ss.ms.SetPeerPID(s.PeerPID())
	s.Data = ss
	act := ss.gov.MilterConnect(s.Context(), &ss.ms, host, milterAddr(family, addr), strconv.Itoa(int(port)))
	if act != "" {
		h.d.milterLog(s, "CONNECT", act, host, addr)
	}
	return milterResponse(act)
}

func (h milterConnect) Close(s *milter.Session) {
	if ss, ok := s.Data.(*milterSession); ok {
		ss.gov.MilterClose(s.KeptContext(), &ss.ms)
	}
	h.d.milterGate.wake()
}

// milterRules also applies the policy rules at MAIL, RCPT, DATA and the
// end of the message (milter.policy_rules).
type milterRules struct{ milterConnect }

func session(s *milter.Session) *milterSession {
	ss, _ := s.Data.(*milterSession)
	if ss == nil {
		// A step before CONNECT cannot happen (the engine refuses it);
		// answer with an empty session rather than panic.
		ss = &milterSession{}
		s.Data = ss
	}
	return ss
}

func (h milterRules) Helo(s *milter.Session, name string) milter.Response {
	ss := session(s)
	if ss.gov != nil {
		ss.gov.MilterHelo(&ss.ms, name)
	}
	return milter.Continue
}

func (h milterRules) MailFrom(s *milter.Session, from string, _ []string) milter.Response {
	ss := session(s)
	if ss.gov == nil {
		return milter.Continue
	}
	ss.size = 0
	user, _ := s.Macro("{auth_authen}")
	return h.decide(s, "MAIL", ss.gov.MilterMail(s.Context(), &ss.ms, from, user))
}

func (h milterRules) RcptTo(s *milter.Session, rcpt string, _ []string) milter.Response {
	ss := session(s)
	if ss.gov == nil {
		return milter.Continue
	}
	return h.decide(s, "RCPT", ss.gov.MilterRcpt(s.Context(), &ss.ms, rcpt))
}

func (h milterRules) Data(s *milter.Session) milter.Response {
	ss := session(s)
	if ss.gov == nil {
		return milter.Continue
	}
	return h.decide(s, "DATA", ss.gov.MilterData(s.Context(), &ss.ms))
}

func (h milterRules) EOM(s *milter.Session, _ *milter.Modifier) milter.Response {
	ss := session(s)
	if ss.gov == nil {
		return milter.Continue
	}
	return h.decide(s, "END-OF-MESSAGE", ss.gov.MilterEOM(s.Context(), &ss.ms, ss.size))
}

func (h milterRules) Abort(s *milter.Session) {
	if ss := session(s); ss.gov != nil {
		ss.gov.MilterAbort(s.KeptContext(), &ss.ms)
	}
}

func (h milterRules) decide(s *milter.Session, stage, act string) milter.Response {
	if act == "" {
		return milter.Continue
	}
	h.d.milterLog(s, stage, act, "", "")
	return milterResponse(act)
}

// milterBytes also receives the headers and body, to count a message's
// size for rules that count bytes.
type milterBytes struct{ milterRules }

func (h milterBytes) Header(s *milter.Session, name, value string) milter.Response {
	session(s).size += int64(len(name) + len(value) + 4) // "name: value\r\n"
	return milter.Continue
}

func (h milterBytes) EOH(s *milter.Session) milter.Response {
	session(s).size += 2
	return milter.Continue
}

func (h milterBytes) Body(s *milter.Session, chunk []byte) milter.Response {
	session(s).size += int64(len(chunk))
	return milter.Continue
}

// milterNoReply returns the NR_* protocol flags for the steps h receives
// but always answers CONTINUE (HELO, which only records the name; the
// headers, end of headers and body, which only count bytes): the MTA
// then sends them without waiting for a reply, a round trip saved per
// packet (milter.Options.Protocol).
func milterNoReply(h milter.Handler) wire.Protocol {
	switch h.(type) {
	case milterBytes:
		return wire.ProtoNRHelo | wire.ProtoNRHeader | wire.ProtoNREOH | wire.ProtoNRBody
	case milterRules:
		return wire.ProtoNRHelo
	}
	return 0
}

// milterHandler picks the handler that asks the MTA for no more steps than
// the configuration needs.
func (d *Daemon) milterHandler(cfg *config.Config) milter.Handler {
	base := milterConnect{d}
	if !cfg.Milter.PolicyRules {
		return base
	}
	for _, r := range cfg.Policy.Rules {
		if r.Count == "bytes" {
			return milterBytes{milterRules{base}}
		}
	}
	return milterRules{base}
}

// milterAddr reads a CONNECT address: Sendmail writes IPv6 as
// "IPv6:0:0:0:0:0:0:0:1"; a unix socket or unknown family has none.
func milterAddr(family milter.Family, addr string) netip.Addr {
	if family != milter.FamilyInet && family != milter.FamilyInet6 {
		return netip.Addr{}
	}
	if len(addr) > 5 && strings.EqualFold(addr[:5], "IPv6:") {
		addr = addr[5:]
	}
	a, err := netip.ParseAddr(strings.Trim(addr, "[]"))
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

// milterResponse turns a governor action (a policy action or an SMTP
// reply) into the milter's answer.
func milterResponse(act string) milter.Response {
	if act == "" {
		return milter.Continue
	}
	verb, text, _ := strings.Cut(act, " ")
	var code int
	var def string
	switch strings.ToUpper(verb) {
	case "DUNNO", "OK", "WARN", "INFO", "PREPEND", "FILTER", "HOLD", "REDIRECT", "BCC":
		return milter.Continue
	case "DISCARD":
		return milter.Discard
	case "DEFER", "DEFER_IF_PERMIT", "DEFER_IF_REJECT":
		code, def = 450, "4.7.1"
	case "REJECT":
		code, def = 550, "5.7.1"
	default:
		n, err := strconv.Atoi(verb)
		if err != nil || n < 400 || n > 599 {
			return milter.Tempfail
		}
		code, def = n, strconv.Itoa(n/100)+".7.1"
	}
	xcode := def
	if x, rest, ok := strings.Cut(text, " "); ok && isXcode(x, byte('0'+code/100)) {
		xcode, text = x, rest
	} else if isXcode(text, byte('0'+code/100)) {
		xcode, text = text, ""
	}
	if text == "" {
		text = "Rate limit reached"
	}
	r, err := milter.Reply(code, xcode, text)
	if err != nil {
		if code < 500 {
			return milter.Tempfail
		}
		return milter.Reject
	}
	return r
}

// isXcode reports whether s is an RFC 3463 status code of class c.
func isXcode(s string, c byte) bool {
	parts := strings.Split(s, ".")
	if len(parts) != 3 || len(s) == 0 || s[0] != c {
		return false
	}
	for _, p := range parts {
		if p == "" || len(p) > 3 || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}

// milterLog logs a refusal at info level.
func (d *Daemon) milterLog(s *milter.Session, stage, act, host, addr string) {
	args := []any{"stage", stage, "reply", act, "session", s.ID()}
	if host != "" || addr != "" {
		args = append(args, "host", host, "addr", addr)
	}
	key := addr
	if key == "" {
		key = act
	}
	d.refusals.Refused(context.Background(), "milter", stage, key, governor.SummaryEvery, "milter: refused", args...)
}

// milterOptions maps the [milter] settings to the engine's options. The
// configuration owns the defaults; the engine's zero-value defaults are
// the same numbers (TestMilterDefaultsAgree). queue = 0 means no queue,
// which the engine spells negative.
func milterOptions(m config.Milter) milter.Options {
	queue := m.Queue
	if queue == 0 {
		queue = -1
	}
	return milter.Options{
		MaxData:           m.MaxPacket,
		IdleTimeout:       m.IdleTimeout.D(),
		RequestTimeout:    m.RequestTimeout.D(),
		MaxSessions:       m.MaxSessions,
		Workers:           m.Workers,
		QueueLen:          queue,
		QueueFullResponse: map[string]milter.Response{"accept": milter.Accept, "reject": milter.Reject}[m.QueueFull],
	}
}
