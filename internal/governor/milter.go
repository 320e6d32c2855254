package governor

import (
	"context"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"

	"sluice/internal/hostmask"
	"sluice/internal/limiter"
	"sluice/internal/rules"
)

// MilterRules configure the milter door.
type MilterRules struct {
	// RefuseText is the reply, a template, when the client's class holds
	// its refuse cap of sessions: "421 4.7.0 ..." (see MilterRefusal). The
	// MTA hangs up on a 421; the text reaches only its log.
	RefuseText string
	// PolicyRules applies the [[policy.rule]] table at the milter's
	// stages, for MTAs without policy delegation (Sendmail).
	PolicyRules bool
}

// milterTrouble is the refusal at CONNECT while the store cannot count
// and the limiter fails closed.
const milterTrouble = "421 4.3.0 Session limiter temporarily unavailable; try again later"

// MilterSession is one milter connection's state: the SMTP session the MTA
// reports through it, the class slot it holds and the policy transaction.
type MilterSession struct {
	lease   limiter.Lease
	share   shareLease // the session's count in its network's fair share
	class   string
	queue   int64 // the class's queue cap
	req     PolicyRequest
	ps      PolicySession
	rcpts   int64
	txn     int
	inTxn   bool
	refused bool
	pid     int // the MTA process at the other end (0: unknown)
}

// SetPeerPID tells the session which MTA process it serves (SO_PEERCRED
// on a unix socket), so that it can find the slot the anvil door took for
// the same SMTP session (see SessionPairs).
func (ms *MilterSession) SetPeerPID(pid int) { ms.pid = pid }

// MilterConnect admits or refuses an SMTP session at CONNECT. name is the
// client's host name as the MTA knows it ("[192.0.2.1]" or "" when it has
// none), addr its address (invalid for a non-IP connection). The session
// takes a slot of the client's class until MilterClose; beyond the class's
// refuse cap it is refused. The result is a policy action ("" to go on).
func (g *Governor) MilterConnect(ctx context.Context, ms *MilterSession, name string, addr netip.Addr, port string) string {
	g.milterRelease(ctx, ms)
	host := name
	if strings.HasPrefix(host, "[") || host == "unknown" {
		host = ""
	}
	ms.req = PolicyRequest{ProtocolState: rules.StateConnect, ClientName: host, ReverseClientName: host, ClientPort: port,
		PolicyContext: "milter"}
	if addr.IsValid() {
		ms.req.ClientAddress = addr.Unmap().String()
	}
	peer := hostmask.PeerAddr(host, addr.Unmap())
	cls := g.classes.Match(peer)
	ms.class, ms.queue = cls.Name, cls.Queue
	found, moved, movedQueue, shared := g.pairs.adopt(ms.pid, addr.Unmap(), cls.Name)
	if found && moved.ID == 0 {
		return g.milterAdopted(ctx, ms, cls, host)
	}
	lease, held, ok, err := g.lim.Acquire(ctx, cls.LeaseKey(), cls.Refuse, 0, "class sessions")
	// A slot anvil took in another class (anvil knows no host names) ends
	// once the session holds its own, or is refused.
	g.releaseClass(ctx, moved, movedQueue)
	switch {
	case err != nil:
		if g.lim.FailOpen() {
			g.log.Warn("milter: class count failed; admitting the session", "class", cls.Name, "client", ms.req.ClientAddress, "err", err)
			g.failMode(ctx, "milter", cls.Name, false, "", err)
			break
		}
		g.failMode(ctx, "milter", cls.Name, true, milterTrouble, err)
		ms.refused = true
		return milterTrouble
	case !ok:
		ms.refused = true
		reply := MilterRefusal(g.milter.RefuseText, cls, held)
		g.observe(ctx, Verdict{Door: "milter", Rule: "class", Key: cls.Name, Count: held, Limit: sessionCap(cls.Refuse), Refused: true, Reply: reply,
			Reason: ReasonClass, Client: addr.Unmap(), Window: SummaryEvery, Msg: "milter: class full; refusing the session",
			Args: []any{"class", cls.Name, "refuse", cls.Refuse, "sessions", held, "client", ms.req.ClientAddress, "name", host}})
		return reply
	default:
		admit, o := g.reserveAdmits(ctx, cls, held)
		if !admit {
			if !shared {
				net, ok := limiter.ShareNet(addr)
				g.markRefused(cls, net, ok)
			}
			g.releaseClass(ctx, lease, cls.Queue)
			ms.refused = true
			v := g.reserveVerdict("milter", cls, o, "milter: the free sessions are reserved for other classes; refusing the session",
				"class", cls.Name, "class_sessions", held-1, "sessions", o.Sessions, "capacity", g.capacity.Sessions, "unused_reserved", o.Unused,
				"client", ms.req.ClientAddress, "name", host)
			v.Client = addr.Unmap()
			g.observe(ctx, v)
			return v.Reply
		}
		if !shared {
			net, ok := limiter.ShareNet(addr)
			var r *shareRefusal
			if ms.share, r = g.shareAdmits(cls, net, ok, o); r != nil {
				return g.milterShareRefused(ctx, ms, cls, lease, r, host, addr.Unmap())
			}
		}
		ms.lease = lease
		g.observe(ctx, Verdict{Door: "milter", Rule: "class", Key: cls.Name, Count: held, Limit: sessionCap(cls.Refuse)})
	}
	if g.log.Enabled(ctx, slog.LevelDebug) {
		g.log.Debug("milter connect", "class", cls.Name, "sessions", held, "refuse", cls.Refuse, "client", ms.req.ClientAddress, "name", host)
	}
	return g.milterPolicy(ctx, ms)
}

// milterShareRefused refuses a session its network's fair share has no
// room for, giving back the class slot it took.
func (g *Governor) milterShareRefused(ctx context.Context, ms *MilterSession, cls *limiter.Class, lease limiter.Lease, r *shareRefusal, host string, client netip.Addr) string {
	g.releaseClass(ctx, lease, cls.Queue)
	ms.refused = true
	v := shareVerdict("milter", cls, r, "milter: the network holds its fair share of the sessions; refusing the session",
		"class", cls.Name, "network", r.net.String(), "network_sessions", r.held, "share", r.share, "client", ms.req.ClientAddress, "name", host)
	v.Client = client
	g.observe(ctx, v)
	return v.Reply
}

// milterAdopted admits a session whose class slot the anvil door took:
// the same SMTP session, already counted and already checked against the
// class's cap.
func (g *Governor) milterAdopted(ctx context.Context, ms *MilterSession, cls *limiter.Class, host string) string {
	held, err := g.lim.Held(ctx, cls.LeaseKey())
	if err != nil {
		held = 0
	}
	g.observe(ctx, Verdict{Door: "milter", Rule: "class", Key: cls.Name, Count: held, Limit: sessionCap(cls.Refuse)})
	if g.log.Enabled(ctx, slog.LevelDebug) {
		g.log.Debug("milter connect: the session holds the slot anvil took", "class", cls.Name, "sessions", held, "client", ms.req.ClientAddress, "name", host, "pid", ms.pid)
	}
	return g.milterPolicy(ctx, ms)
}

// MilterRefusal fills a refusal template: {class}, {refuse} (the cap) and
// {sessions} (the sessions the class holds).
func MilterRefusal(tmpl string, cls *limiter.Class, sessions int64) string {
	if tmpl == "" {
		tmpl = rules.DefaultMilterRefuse
	}
	r := strings.NewReplacer("{class}", cls.Name, "{refuse}", strconv.FormatInt(cls.Refuse, 10),
		"{sessions}", strconv.FormatInt(sessions, 10))
	return r.Replace(tmpl)
}

// MilterHelo records the HELO/EHLO name.
func (g *Governor) MilterHelo(ms *MilterSession, helo string) { ms.req.HeloName = helo }

// MilterMail starts a transaction with its sender ("" or "<>" for the null
// sender) and the SASL login name, if any.
func (g *Governor) MilterMail(ctx context.Context, ms *MilterSession, sender, saslUser string) string {
	g.MilterAbort(ctx, ms)
	ms.txn++
	ms.inTxn = true
	ms.rcpts = 0
	ms.req.ProtocolState = "MAIL"
	ms.req.Sender = strings.Trim(sender, "<>")
	ms.req.SASLUsername = saslUser
	ms.req.Recipient = ""
	ms.req.Instance = strconv.Itoa(ms.txn)
	return g.milterPolicy(ctx, ms)
}

// MilterRcpt decides one recipient. The caller reports through
// MilterRcptAccepted whether the recipient went on (the MTA may still
// refuse it for reasons of its own; a refused one is not counted).
func (g *Governor) MilterRcpt(ctx context.Context, ms *MilterSession, rcpt string) string {
	ms.req.ProtocolState = rules.StateRcpt
	ms.req.Recipient = strings.Trim(rcpt, "<>")
	act := g.milterPolicy(ctx, ms)
	if milterPasses(act) {
		ms.rcpts++
	}
	return act
}

// MilterData decides the DATA command.
func (g *Governor) MilterData(ctx context.Context, ms *MilterSession) string {
	ms.req.ProtocolState = rules.StateData
	ms.req.Recipient = ""
	ms.req.RecipientCount = ms.rcpts
	return g.milterPolicy(ctx, ms)
}

// MilterEOM decides the end of a message of size bytes; the transaction
// ends whatever the answer.
func (g *Governor) MilterEOM(ctx context.Context, ms *MilterSession, size int64) string {
	ms.req.ProtocolState = rules.StateEOM
	ms.req.Recipient = ""
	ms.req.RecipientCount = ms.rcpts
	ms.req.Size = size
	act := g.milterPolicy(ctx, ms)
	ms.inTxn = false
	return act
}

// MilterAbort ends a transaction that did not reach the end of its
// message: counts taken at RCPT by rules with rollback are taken back.
func (g *Governor) MilterAbort(ctx context.Context, ms *MilterSession) {
	if !ms.inTxn {
		return
	}
	ms.inTxn = false
	if g.milter.PolicyRules {
		// A new instance tells the policy session that the old one ended
		// without END-OF-MESSAGE.
		ms.req.Instance = strconv.Itoa(ms.txn) + ".aborted"
		g.policyTransaction(ctx, &ms.ps, &ms.req)
	}
}

// MilterClose ends the session: its class slot is freed and an unfinished
// transaction is taken back. It is safe to call more than once.
func (g *Governor) MilterClose(ctx context.Context, ms *MilterSession) {
	g.milterRelease(ctx, ms)
	g.PolicyClose(ctx, &ms.ps)
	*ms = MilterSession{pid: ms.pid}
}

func (g *Governor) milterRelease(ctx context.Context, ms *MilterSession) {
	g.releaseClass(ctx, ms.lease, ms.queue)
	ms.lease = limiter.Lease{}
	ms.share.release()
}

// milterPolicy runs the policy rules for the session's current request,
// when the milter applies them.
func (g *Governor) milterPolicy(ctx context.Context, ms *MilterSession) string {
	if !g.milter.PolicyRules {
		return ""
	}
	act, err := g.PolicyCheck(ctx, &ms.ps, &ms.req)
	if err != nil {
		g.log.Warn("milter: policy check failed", "err", err)
		return ""
	}
	if act == g.policy.Default {
		return ""
	}
	return act
}

// milterPasses reports whether a policy action lets the command through.
func milterPasses(act string) bool {
	if act == "" {
		return true
	}
	verb, _, _ := strings.Cut(act, " ")
	switch strings.ToUpper(verb) {
	case "DUNNO", "OK", "WARN", "PREPEND", "INFO", "FILTER", "HOLD", "REDIRECT", "BCC":
		return true
	}
	return false
}

// ClassesFull reports whether every class holds its refuse cap of
// sessions, XLA's condition for not accepting at all. A class without a
// cap is never full; a store error counts as not full.
func (g *Governor) ClassesFull(ctx context.Context) bool {
	for _, c := range g.classes.All() {
		if c.Refuse <= 0 {
			return false
		}
		n, err := g.lim.Held(ctx, c.LeaseKey())
		if err != nil || n < c.Refuse {
			return false
		}
	}
	return true
}
