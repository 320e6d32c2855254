package governor

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"strings"
	"time"

	"sluice/internal/hostmask"
	"sluice/internal/limiter"
)

// AnvilEvent is one of the things anvil counts per (service, client).
type AnvilEvent uint8

// Anvil's counters. The order is the order of the per-ident counters.
const (
	AnvilConn   AnvilEvent = iota // connections (rate); the count is a lease
	AnvilMail                     // MAIL FROM
	AnvilRcpt                     // RCPT TO and VRFY
	AnvilNewTLS                   // new TLS sessions
	AnvilAuth                     // AUTH commands
	AnvilTLSTr                    // TLS trace events (Postfix 3.12)
	numAnvilEvents
	// anvilCount names the connection count where an AnvilEvent names a figure.
	anvilCount = AnvilEvent(255)
)

var anvilStats = [numAnvilEvents]string{"connection rate", "message rate", "recipient rate", "newtls rate", "auth rate", "tlstr rate"}

// AnvilLimits are the smtpd limits anvil's replies are compared with, in
// the order count, then one rate per AnvilEvent. A value of 0 means "off"
// in smtpd's terms, and "no cap" in a class override.
type AnvilLimits struct {
	Count int64                 // smtpd_client_connection_count_limit
	Rates [numAnvilEvents]int64 // the rate limits, by AnvilEvent
}

// ClassLimits overrides the smtpd limits for the clients of one class;
// nil fields keep smtpd's limit.
type ClassLimits struct {
	Count *int64                 // the class's connection count limit
	Rates [numAnvilEvents]*int64 // its rate limits, by AnvilEvent
}

// AnvilRules is how sluice answers anvil requests.
type AnvilRules struct {
	// Unit is anvil_rate_time_unit.
	Unit time.Duration
	// Postfix holds smtpd's limits from main.cf; sluice needs them only to
	// scale its replies so that smtpd enforces per-class limits.
	Postfix AnvilLimits
	// Classes maps a class name to its overrides.
	Classes map[string]ClassLimits
	// NoClassCaps leaves the class session caps to the milter door: anvil
	// counts no class sessions and refuses none (its counts and rates,
	// and their per-class limits, still apply).
	NoClassCaps bool
}

// AnvilStream is the state of one anvil client stream (one smtpd): the
// connection it holds, as anvil links at most one entry to a stream.
type AnvilStream struct {
	ident      string
	lease      limiter.Lease
	classLease limiter.Lease
	share      shareLease // the session's count in its network's fair share
	class      string
	classQueue int64     // the class's queue cap, for handing the slot to a waiting send
	pid        int       // the smtpd process at the other end (0: unknown)
	slot       *pairSlot // the class slot, when paired for the milter (see SessionPairs)

	// What the stream's last ident derives to (its keys and class), and
	// one check and its decision: a stream's requests are one at a time,
	// and a session's name the ident of its connection, so a request
	// builds no key, parses no address and allocates nothing. It outlives
	// the connection (anvilDrop keeps it): smtpd's next request is most
	// often about the same client.
	last  anvilIdent
	check [1]limiter.Check
	out   [1]limiter.Decision
}

// anvilIdent is what one ident derives to: its store keys, and its class
// in one class table.
type anvilIdent struct {
	ident, rateKey, countKey string
	classes                  *limiter.Classes // the table cls was matched in
	cls                      *limiter.Class
}

// anvilIdentOf returns what ident derives to, from the stream's last when
// it is the same ident and g's class table.
func (g *Governor) anvilIdentOf(st *AnvilStream, ident string) *anvilIdent {
	l := &st.last
	if l.ident != ident || l.rateKey == "" {
		*l = anvilIdent{ident: ident, rateKey: anvilRateKey(ident), countKey: anvilCountKey(ident)}
	}
	if l.classes != g.classes {
		l.classes, l.cls = g.classes, g.classes.Match(AnvilPeer(ident))
	}
	return l
}

// SetPeerPID tells the stream which smtpd process it serves (SO_PEERCRED
// on a unix socket), so that the milter door can find its session.
func (st *AnvilStream) SetPeerPID(pid int) { st.pid = pid }

// Holding reports whether the stream holds a connection.
func (st *AnvilStream) Holding() bool {
	return st.lease.ID != 0 || st.classLease.ID != 0 || st.slot != nil
}

func anvilCountKey(ident string) string { return "anvil\x00c\x00" + ident }
func anvilRateKey(ident string) string  { return "anvil\x00r\x00" + ident }

func (g *Governor) anvilCheck(ident string, ev AnvilEvent) limiter.Check {
	return g.anvilCheckKey(anvilRateKey(ident), ev)
}

func (g *Governor) anvilCheckKey(key string, ev AnvilEvent) limiter.Check {
	return limiter.Check{
		Key:     key,
		Counter: uint8(ev),
		Limit:   limiter.Limit{Algorithm: limiter.Anvil, N: limiter.Unlimited, Period: g.anvil.Unit},
		Stat:    anvilStats[ev],
	}
}

// anvilHit counts one ev for ident and returns its decision, with the
// stream's own check and decision.
func (g *Governor) anvilHit(ctx context.Context, st *AnvilStream, ident string, ev AnvilEvent) (limiter.Decision, error) {
	st.check[0] = g.anvilCheckKey(g.anvilIdentOf(st, ident).rateKey, ev)
	st.out[0] = limiter.Decision{}
	err := g.lim.Hit(ctx, 1, limiter.Leaky, st.check[:], st.out[:])
	return st.out[0], err
}

// AnvilPeer turns an anvil ident, "service:client", into the peer that
// class masks are matched against. The service is the master.cf service
// name: "smtp", or "host:port" / "[v6]:port" for a service bound to one
// address. The client is an address, or from Postfix 3.8 a network
// ("2001:db8::/84"); anything else matches only "*".
func AnvilPeer(ident string) hostmask.Peer {
	a, p := anvilClientOf(ident)
	switch {
	case p.IsValid():
		return hostmask.Peer{Net: p.Masked()}
	case a.IsValid():
		return hostmask.PeerAddr("", a)
	}
	return hostmask.Peer{}
}

// anvilClientOf parses an ident's client: an address, or a network
// (prefix valid); neither for anything else. It is on every request's
// path: a network is parsed only when the client has a '/', so that an
// address costs no failed ParsePrefix (and its error).
func anvilClientOf(ident string) (netip.Addr, netip.Prefix) {
	client := anvilClient(ident)
	if strings.IndexByte(client, '/') >= 0 {
		p, err := netip.ParsePrefix(client)
		if err != nil {
			return netip.Addr{}, netip.Prefix{}
		}
		return netip.Addr{}, p
	}
	a, err := netip.ParseAddr(client)
	if err != nil {
		return netip.Addr{}, netip.Prefix{}
	}
	return a, netip.Prefix{}
}

// anvilNet returns the network of an ident's client, for the fair shares.
func anvilNet(ident string) (netip.Prefix, bool) {
	a, p := anvilClientOf(ident)
	switch {
	case p.IsValid():
		return limiter.ShareNetOf(p)
	case a.IsValid():
		return limiter.ShareNet(a)
	}
	return netip.Prefix{}, false
}

// anvilAddr returns the address of an ident's client (invalid for a
// network, which Postfix reports when it counts clients by prefix).
func anvilAddr(ident string) netip.Addr {
	a, p := anvilClientOf(ident)
	if p.IsValid() && p.IsSingleIP() {
		return p.Addr().Unmap()
	}
	return a.Unmap()
}

// anvilClient returns the client part of an ident.
func anvilClient(ident string) string {
	first, rest, ok := strings.Cut(ident, ":")
	if !ok {
		return ""
	}
	// A service bound to an address: "[::1]:25", "127.0.0.1:25" or
	// "mx.example.org:25"; skip its port too.
	if strings.HasPrefix(ident, "[") {
		end := strings.Index(ident, "]:")
		if end < 0 {
			return ""
		}
		_, client, _ := strings.Cut(ident[end+2:], ":")
		return client
	}
	if strings.Contains(first, ".") {
		if port, client, ok := strings.Cut(rest, ":"); ok && port != "" && strings.Trim(port, "0123456789") == "" {
			return client
		}
	}
	return rest
}

// AnvilConnect registers a connection for ident on the stream, and returns
// the count and rate to report (see scale).
func (g *Governor) AnvilConnect(ctx context.Context, st *AnvilStream, ident string) (count, rate int64, err error) {
	g.anvilDrop(ctx, st)
	id := g.anvilIdentOf(st, ident)
	cls := id.cls
	lease, held, _, err := g.lim.Acquire(ctx, id.countKey, 0, 0, "connection count")
	if err != nil {
		// The store cannot count: answer per the fail mode. smtpd refuses
		// only when the count is over its limit.
		if g.lim.FailOpen() || g.anvil.Postfix.Count <= 0 {
			g.failMode(ctx, "anvil", cls.Name, false, "", err)
			return 0, 0, nil
		}
		g.failMode(ctx, "anvil", cls.Name, true, "421 (smtpd's connection count limit, reported exceeded)", err)
		return g.anvil.Postfix.Count + 1, 0, nil
	}
	st.ident, st.lease = ident, lease
	classFull := false
	if !g.anvil.NoClassCaps {
		classFull, _, _ = g.anvilClass(ctx, st, ident, cls)
	}
	out, err := g.anvilHit(ctx, st, ident, AnvilConn)
	if err != nil {
		out.Count = 0 // the connection is counted; its rate is unknown
	}
	count = g.scaleCount(cls, held)
	rate = g.scaleRate(cls, AnvilConn, out.Count)
	if !classFull {
		g.anvilClassRefusal(ctx, cls, ident, anvilCount, held, count)
	}
	g.anvilClassRefusal(ctx, cls, ident, AnvilConn, out.Count, rate)
	if classFull {
		if pf := g.anvil.Postfix.Count; pf > 0 {
			count = max(count, pf+1)
		}
	}
	if g.log.Enabled(ctx, slog.LevelDebug) {
		g.log.Debug("anvil connect", "ident", ident, "class", cls.Name, "count", held, "rate", out.Count, "reported_count", count, "reported_rate", rate)
	}
	return count, rate, nil
}

// anvilClass takes a slot of the session's class for the stream, and
// reports whether the class was full instead (or the free sessions are
// reserved for other classes), how many it holds, and the rule that
// refused: "class" or "reserve".
func (g *Governor) anvilClass(ctx context.Context, st *AnvilStream, ident string, cls *limiter.Class) (full bool, held int64, rule string) {
	cl, held, ok, err := g.lim.Acquire(ctx, cls.LeaseKey(), cls.Refuse, 0, "class sessions")
	if err != nil {
		g.log.Warn("anvil: class count failed", "class", cls.Name, "err", err)
		return false, 0, ""
	}
	if ok {
		admit, o := g.reserveAdmits(ctx, cls, held)
		net, netOK := anvilNet(ident)
		if !admit {
			g.markRefused(cls, net, netOK)
			g.releaseClass(ctx, cl, cls.Queue)
			v := g.reserveVerdict("anvil", cls, o, "anvil: the free sessions are reserved for other classes; smtpd will refuse the connection",
				"ident", ident, "class", cls.Name, "class_sessions", held-1, "sessions", o.Sessions, "capacity", g.capacity.Sessions, "unused_reserved", o.Unused)
			v.Client = anvilAddr(ident)
			g.observe(ctx, v)
			return true, held - 1, "reserve"
		}
		share, r := g.shareAdmits(cls, net, netOK, o)
		if r != nil {
			g.releaseClass(ctx, cl, cls.Queue)
			v := shareVerdict("anvil", cls, r, "anvil: the network holds its fair share of the sessions; smtpd will refuse the connection",
				"ident", ident, "class", cls.Name, "network", r.net.String(), "network_sessions", r.held, "share", r.share)
			v.Client = anvilAddr(ident)
			g.observe(ctx, v)
			return true, held - 1, "share"
		}
		st.share = share
		st.classLease, st.class, st.classQueue = cl, cls.Name, cls.Queue
		g.pairAnvil(st, ident)
	}
	v := Verdict{Door: "anvil", Rule: "class", Key: cls.Name, Count: held, Limit: sessionCap(cls.Refuse), Refused: !ok}
	if !ok {
		v.Reply = "421 4.7.0 Error: too many connections (class " + cls.Name + " full)"
		v.Reason, v.Window, v.Client = ReasonClass, SummaryEvery, anvilAddr(ident)
		v.Msg, v.Args = "anvil: class full; smtpd will refuse the connection", []any{"ident", ident, "class", cls.Name, "refuse", cls.Refuse, "class_sessions", held}
	}
	g.observe(ctx, v)
	return !ok, held, "class"
}

// anvilDrop ends the connection the stream holds, if any.
func (g *Governor) anvilDrop(ctx context.Context, st *AnvilStream) {
	if st.lease.ID != 0 {
		if _, err := g.lim.Release(ctx, st.lease); err != nil {
			g.log.Warn("anvil: releasing a connection failed", "ident", st.ident, "err", err)
		}
	}
	g.releaseClass(ctx, st.classLease, st.classQueue)
	st.share.release()
	g.unpairAnvil(ctx, st)
	*st = AnvilStream{pid: st.pid, last: st.last}
}

// AnvilDisconnect ends the stream's connection for ident, if it holds one.
// A disconnect for a session the previous daemon carried over ends that
// session.
func (g *Governor) AnvilDisconnect(ctx context.Context, st *AnvilStream, ident string) {
	if st.ident == ident {
		g.anvilDrop(ctx, st)
		return
	}
	if c, ok := g.carried.take(ident); ok {
		g.anvilDrop(ctx, &c)
	}
}

// AnvilClose drops what a closed stream held.
func (g *Governor) AnvilClose(ctx context.Context, st *AnvilStream) { g.anvilDrop(ctx, st) }

// AnvilEvent counts one event for ident and returns the rate to report.
// An event for an ident sluice does not know (sluice restarted while smtpd
// held a session) first registers a connection, as anvil does.
func (g *Governor) AnvilEvent(ctx context.Context, st *AnvilStream, ev AnvilEvent, ident string) (int64, error) {
	if ev == AnvilConn || ev >= numAnvilEvents {
		return 0, fmt.Errorf("anvil event %d: %w", ev, limiter.ErrBadRequest)
	}
	if st.ident != ident && !g.claimCarried(ctx, st, ident) {
		known, err := g.anvilKnown(ctx, ident)
		if err != nil {
			known = true // cannot tell: do not register a connection
		}
		if !known {
			if _, _, err := g.AnvilConnect(ctx, st, ident); err != nil {
				return 0, err
			}
		}
	}
	out, err := g.anvilHit(ctx, st, ident, ev)
	cls := g.anvilIdentOf(st, ident).cls
	if err != nil {
		// The store cannot count: report per the fail mode.
		if g.lim.FailOpen() || g.anvil.Postfix.Rates[ev] <= 0 {
			g.failMode(ctx, "anvil", cls.Name, false, "", err)
			return 0, nil
		}
		g.failMode(ctx, "anvil", cls.Name, true, "421 (smtpd's "+anvilStats[ev]+" limit, reported exceeded)", err)
		return g.anvil.Postfix.Rates[ev] + 1, nil
	}
	rate := g.scaleRate(cls, ev, out.Count)
	g.anvilClassRefusal(ctx, cls, ident, ev, out.Count, rate)
	return rate, nil
}

// anvilClassRefusal logs (bounded, per class and figure) a figure over a
// class's own limit, which smtpd refuses once sluice reports it scaled:
// smtpd's log has the scaled figure, this line the true one. ev is the
// rate's event, or anvilCount for the connection count. A figure without a class
// override is smtpd's to log, with its true value.
func (g *Governor) anvilClassRefusal(ctx context.Context, cls *limiter.Class, ident string, ev AnvilEvent, actual, reported int64) {
	cl, ok := g.anvil.Classes[cls.Name]
	if !ok {
		return
	}
	over, postfix, stat, window := cl.Count, g.anvil.Postfix.Count, "connection count", SummaryEvery
	if ev != anvilCount {
		over, postfix, stat, window = cl.Rates[ev], g.anvil.Postfix.Rates[ev], anvilStats[ev], g.anvil.Unit
	}
	if over == nil || postfix <= 0 || reported <= postfix {
		return
	}
	g.refused(ctx, "anvil", stat, cls.Name, window, "anvil: over the class's limit; smtpd will refuse (it logs the scaled figure)",
		"ident", ident, "class", cls.Name, "limit", stat, "count", actual, "class_limit", *over, "reported", reported, "smtpd_limit", postfix)
}

// anvilKnown reports whether anvil would have an entry for ident: a
// connection is held, or its window is alive.
func (g *Governor) anvilKnown(ctx context.Context, ident string) (bool, error) {
	held, err := g.lim.Held(ctx, anvilCountKey(ident))
	if err != nil || held > 0 {
		return held > 0, err
	}
	cs, err := g.anvilRates(ctx, ident)
	if err != nil {
		return false, err
	}
	for _, v := range cs {
		if v > 0 {
			return true, nil
		}
	}
	return false, nil
}

func (g *Governor) anvilRates(ctx context.Context, ident string) ([numAnvilEvents]int64, error) {
	var checks [numAnvilEvents]limiter.Check
	var out [numAnvilEvents]limiter.Decision
	var rates [numAnvilEvents]int64
	for ev := range numAnvilEvents {
		checks[ev] = g.anvilCheck(ident, ev)
	}
	if err := g.lim.Peek(ctx, 0, checks[:], out[:]); err != nil {
		return rates, fmt.Errorf("look up %s: %w", ident, err)
	}
	for i := range out {
		rates[i] = out[i].Count
	}
	return rates, nil
}

// AnvilNewTLSStatus reports the new-TLS rate of ident without counting.
func (g *Governor) AnvilNewTLSStatus(ctx context.Context, ident string) (int64, error) {
	rates, err := g.anvilRates(ctx, ident)
	if err != nil {
		return 0, err
	}
	return g.scaleRate(g.classes.Match(AnvilPeer(ident)), AnvilNewTLS, rates[AnvilNewTLS]), nil
}

// AnvilCounts are the true figures of one ident, unscaled.
type AnvilCounts struct {
	Count int64                 // open connections
	Rates [numAnvilEvents]int64 // events in the current window, by AnvilEvent
}

// AnvilLookup reports the true counters of ident (not scaled: lookup is
// for people and tests, not for smtpd's comparisons).
func (g *Governor) AnvilLookup(ctx context.Context, ident string) (AnvilCounts, error) {
	held, err := g.lim.Held(ctx, anvilCountKey(ident))
	if err != nil {
		return AnvilCounts{}, fmt.Errorf("look up %s: %w", ident, err)
	}
	rates, err := g.anvilRates(ctx, ident)
	return AnvilCounts{Count: held, Rates: rates}, err
}

func (g *Governor) scaleCount(cls *limiter.Class, actual int64) int64 {
	var over *int64
	if cl, ok := g.anvil.Classes[cls.Name]; ok {
		over = cl.Count
	}
	return scale(actual, over, g.anvil.Postfix.Count)
}

func (g *Governor) scaleRate(cls *limiter.Class, ev AnvilEvent, actual int64) int64 {
	var over *int64
	if cl, ok := g.anvil.Classes[cls.Name]; ok {
		over = cl.Rates[ev]
	}
	return scale(actual, over, g.anvil.Postfix.Rates[ev])
}

// scale turns a true figure into the one to report, so that smtpd, which
// refuses when reported > its own limit P, refuses exactly when the true
// figure exceeds the class limit L: it reports ceil(actual*P/L). Without a
// class override, or when smtpd does not check (P = 0), the true figure is
// reported; a class override of 0 (no cap) reports at most P.
func scale(actual int64, classLimit *int64, postfix int64) int64 {
	if classLimit == nil || postfix <= 0 {
		return actual
	}
	l := *classLimit
	if l <= 0 {
		return min(actual, postfix)
	}
	if actual > (math.MaxInt32/postfix)+1 {
		return math.MaxInt32
	}
	return min((actual*postfix+l-1)/l, math.MaxInt32)
}
