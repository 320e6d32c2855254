package governor

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"sluice/internal/hostmask"
	"sluice/internal/limiter"
	"sluice/internal/limittable"
	"sluice/internal/rules"
)

// PolicyRequest is what the governor needs of a policy query; the app's
// adapter fills it from the protocol's request. Each field holds the
// Postfix attribute of the same name in snake case (ProtocolState is
// protocol_state, SASLUsername sasl_username...), "" or 0 when absent.
type PolicyRequest struct {
	ProtocolState     string
	ClientAddress     string
	ClientPort        string
	ClientName        string
	ReverseClientName string
	HeloName          string
	Sender            string
	Recipient         string
	RecipientCount    int64
	Size              int64
	SASLUsername      string
	PolicyContext     string
	Instance          string
	// Attr returns any other attribute by its Postfix name, for keys.
	Attr func(name string) (string, bool)
}

// attr returns an attribute's value by its Postfix name.
func (r *PolicyRequest) attr(name string) string {
	switch name {
	case "protocol_state":
		return r.ProtocolState
	case "client_address":
		return r.ClientAddress
	case "client_port":
		return r.ClientPort
	case "client_name":
		return r.ClientName
	case "reverse_client_name":
		return r.ReverseClientName
	case "helo_name":
		return r.HeloName
	case "sender":
		return r.Sender
	case "recipient":
		return r.Recipient
	case "sasl_username":
		return r.SASLUsername
	case "policy_context":
		return r.PolicyContext
	case "instance":
		return r.Instance
	}
	if r.Attr != nil {
		v, _ := r.Attr(name)
		return v
	}
	return ""
}

// PolicyMatch selects the requests a rule applies to. Every non-empty
// list must match (AND); within a list any entry may match (OR). Each list
// is matched against the request attribute of the same name; SenderDomain
// and RecipientDomain against the address's domain, Class against the
// client's class name.
type PolicyMatch struct {
	ClientAddress     []hostmask.Mask // networks
	ClientName        []hostmask.Mask
	ReverseClientName []hostmask.Mask
	HeloName          []hostmask.Mask
	Sender            []string // addresses, lower case; "<>" is the null sender
	SenderDomain      []hostmask.Mask
	Recipient         []string
	RecipientDomain   []hostmask.Mask
	SASLUsername      []string // "*": any authenticated user
	PolicyContext     []string
	ProtocolState     []string
	Class             []string
}

// KeyPart is one component of a rule's key: an attribute, optionally
// reduced to a network (client_address/24/64), or a derived value
// (sender_domain, recipient_domain, class).
type KeyPart struct {
	Attr     string // the attribute's Postfix name, or the derived value's
	V4Prefix int    // for client_address: 0 keeps the address
	V6Prefix int    // for client_address, with V4Prefix set: IPv6's prefix
}

// String renders the part as configured.
func (k KeyPart) String() string {
	if k.V4Prefix == 0 {
		return k.Attr
	}
	return fmt.Sprintf("%s/%d/%d", k.Attr, k.V4Prefix, k.V6Prefix)
}

// PolicyRule is one limit rule.
type PolicyRule struct {
	Name   string          // for logs, metrics and the status page
	Match  PolicyMatch     // the requests it applies to
	Key    []KeyPart       // what it counts by, joined into the store key
	Count  rules.Counted   // what one request adds: messages, recipients, ...
	Stage  string          // where the count is taken: RCPT, DATA or END-OF-MESSAGE
	Limits []limiter.Limit // hit together in one Store.Hit; any over its limit refuses
	Mode   limiter.Mode    // whether refused requests count too (strict) or not (leaky)
	// Action is the reply when over, a template (see PolicyAction).
	Action string
	// DryRun answers WARN with the action's text and lets the mail pass.
	DryRun bool
	// Rollback takes back RCPT-stage counts of a transaction that never
	// reached END-OF-MESSAGE (it needs the policy service called at
	// END-OF-MESSAGE too).
	Rollback bool
	// Table, if set, holds limits or exemptions per key (EffectiveLimits).
	Table *limittable.Table
}

// PolicyRules are the rules in force, in order.
type PolicyRules struct {
	Rules []PolicyRule
	// Default is the reply when no rule refuses (normally DUNNO).
	Default string
}

// storeTrouble is the reply when the limiter cannot decide and fails closed.
const storeTrouble = "DEFER_IF_PERMIT 4.3.0 Rate limiter temporarily unavailable; try again later"

// PolicySession is the state of one policy connection: the transaction it
// is in and the counts that may have to be taken back.
//
// It keeps copies of what it compares the next request with, in buffers
// it reuses: a request's strings may be the decoder's, valid only until
// the next request is read, and copying them costs no allocation once the
// buffers have grown.
type PolicySession struct {
	instance  []byte // the transaction's instance
	finished  bool   // the instance reached END-OF-MESSAGE
	pending   []pendingHit
	counted   []string // "rule" names counted once for this instance
	smtpSess  []byte   // client_address, NUL, client_port of the SMTP session
	connCount []string // connection rules counted for this SMTP session
	connDeny  string   // a connection rule's refusal, kept for the session
}

type pendingHit struct {
	checks []limiter.Check
	n      int64
	at     time.Time
}

// PolicyCheck decides one policy query and returns the action.
func (g *Governor) PolicyCheck(ctx context.Context, ps *PolicySession, req *PolicyRequest) (string, error) {
	return g.policyDecide(ctx, ps, req, nil)
}

// policyDecide is the one decision of a policy query. With ex set it is
// a dry run (PolicyExplain): the limits are peeked, not hit, and each
// rule's step is noted in ex, where a live query logs, observes, keeps
// and takes back (policyEffects); both answer alike from the steps.
func (g *Governor) policyDecide(ctx context.Context, ps *PolicySession, req *PolicyRequest, ex *Explanation) (string, error) {
	dry := ex != nil
	if !dry {
		g.policyTransaction(ctx, ps, req)
	}
	if ps.connDeny != "" {
		return ps.connDeny, nil
	}
	var done []pendingHit // a live query's leaky hits, undone if a later rule refuses
	var warn string
	peer := peerOf(req)
	var class string
	for i := range g.policy.Rules {
		st := g.ruleStep(ctx, ps, req, &g.policy.Rules[i], peer, &class, dry)
		if dry {
			if err := ex.noteStep(&st); err != nil {
				return "", err
			}
		} else {
			done = g.policyEffects(ctx, ps, req, &st, done)
		}
		switch {
		case st.failed:
			return storeTrouble, nil
		case st.refused < 0:
		case st.r.DryRun:
			if warn == "" {
				warn = "WARN " + actionText(st.text)
			}
		default:
			return st.text, nil
		}
	}
	if warn != "" {
		return warn, nil
	}
	return g.policy.Default, nil
}

// policyCount hits the checks, or peeks at them for a dry run.
func (g *Governor) policyCount(ctx context.Context, n int64, mode limiter.Mode, checks []limiter.Check, dry bool) ([]limiter.Decision, error) {
	out := make([]limiter.Decision, len(checks))
	if dry {
		return out, g.lim.Peek(ctx, n, checks, out)
	}
	return out, g.lim.Hit(ctx, n, mode, checks, out)
}

// policyPending keeps a rule's hit for taking back: in done if a later
// rule's refusal undoes it, in the session if an unfinished transaction
// does.
func policyPending(ps *PolicySession, r *PolicyRule, req *PolicyRequest, h pendingHit, mode limiter.Mode, refused int, done []pendingHit) []pendingHit {
	if refused >= 0 && !r.DryRun && mode != limiter.Strict {
		return done
	}
	if refused < 0 && r.Mode == limiter.Leaky && !r.DryRun {
		done = append(done, h)
	}
	if r.Rollback && req.ProtocolState == rules.StateRcpt && refused < 0 {
		ps.pending = append(ps.pending, h)
	}
	return done
}

// policyChecks are the store checks of a rule's limits for one key. The
// {hash tag} keeps a rule's limits for one key on one Redis Cluster
// slot, so they are decided in one atomic step.
func policyChecks(r *PolicyRule, key string, limits []limiter.Limit) []limiter.Check {
	checks := make([]limiter.Check, len(limits))
	for j, lim := range limits {
		checks[j] = limiter.Check{Key: "policy\x00{" + r.Name + "\x00" + key + "}\x00" + strconv.Itoa(j), Limit: lim, Stat: r.Name}
	}
	return checks
}

// policyStoreKey is the store key of a rule's key, less the limit's index.
func policyStoreKey(rule, key string) string { return "policy\x00{" + rule + "\x00" + key + "}" }

// policyReport logs a rule's decisions at debug level and shows its
// verdict to the observer; limits are the limits applied
// (EffectiveLimits), refused is the index of the refusing limit, or -1.
func (g *Governor) policyReport(ctx context.Context, r *PolicyRule, req *PolicyRequest, key string, n int64, limits []limiter.Limit, out []limiter.Decision, refused int, at time.Time) {
	if g.log.Enabled(ctx, slog.LevelDebug) {
		for j := range out {
			verdict := "ok"
			if !out[j].Allowed {
				verdict = "over"
			}
			g.log.Debug("policy decision", "rule", r.Name, "key", keyText(key), "count", out[j].Count, "n", n,
				"limit", limits[j].String(), "verdict", verdict, "state", req.ProtocolState, "client", req.ClientAddress)
		}
	}
	if g.obs != nil {
		j := max(refused, 0)
		lim := limits[j]
		v := Verdict{Door: "policy", Rule: r.Name, Key: keyText(key), Count: out[j].Count, Limit: lim, Refused: refused >= 0, DryRun: r.DryRun, At: at}
		if refused >= 0 {
			v.Reply = PolicyAction(r, key, out[refused], lim)
		}
		g.observe(v)
	}
}

func limiterAllows(out []limiter.Decision) bool {
	for _, d := range out {
		if !d.Allowed {
			return false
		}
	}
	return true
}

// policyTransaction follows the SMTP session and the mail transaction of
// the request, taking back counts of a transaction that ended without
// END-OF-MESSAGE.
func (g *Governor) policyTransaction(ctx context.Context, ps *PolicySession, req *PolicyRequest) {
	if !sameSession(ps.smtpSess, req.ClientAddress, req.ClientPort) {
		ps.smtpSess = append(append(append(ps.smtpSess[:0], req.ClientAddress...), 0), req.ClientPort...)
		ps.connCount, ps.connDeny = ps.connCount[:0], ""
	}
	if string(ps.instance) != req.Instance {
		if !ps.finished && len(ps.pending) > 0 {
			g.log.Debug("policy: transaction ended without END-OF-MESSAGE; taking back its counts", "instance", string(ps.instance), "hits", len(ps.pending))
			g.policyUndo(ctx, ps.pending)
		}
		ps.instance = append(ps.instance[:0], req.Instance...)
		ps.finished, ps.pending, ps.counted = false, ps.pending[:0], ps.counted[:0]
	}
	if req.ProtocolState == rules.StateEOM {
		ps.finished = true
		ps.pending = ps.pending[:0]
	}
}

// sameSession reports whether sess (client_address, NUL, client_port)
// names the SMTP session of addr and port.
func sameSession(sess []byte, addr, port string) bool {
	return len(sess) == len(addr)+1+len(port) && string(sess[:len(addr)]) == addr &&
		sess[len(addr)] == 0 && string(sess[len(addr)+1:]) == port
}

// PolicyClose ends a policy connection's session: an unfinished
// transaction's counts are taken back.
func (g *Governor) PolicyClose(ctx context.Context, ps *PolicySession) {
	if !ps.finished && len(ps.pending) > 0 {
		g.policyUndo(ctx, ps.pending)
	}
	*ps = PolicySession{}
}

func (g *Governor) policyUndo(ctx context.Context, hits []pendingHit) {
	for _, h := range hits {
		if err := g.lim.Undo(ctx, h.at, h.n, h.checks); err != nil {
			g.log.Warn("policy: taking back a count failed", "err", err)
		}
	}
}

// policyAmount returns how many events the request adds for the rule, and
// whether it counts here at all.
func policyAmount(r *PolicyRule, req *PolicyRequest, ps *PolicySession) (int64, bool) {
	st := req.ProtocolState
	switch r.Count {
	case rules.CountConnections:
		return 1, !slices.Contains(ps.connCount, r.Name)
	case rules.CountMessages:
		if st != r.Stage {
			return 0, false
		}
		if st == rules.StateRcpt {
			// Once per transaction, at its first admitted recipient.
			return 1, !slices.Contains(ps.counted, r.Name)
		}
		return 1, true
	case rules.CountRecipients:
		if st != r.Stage {
			return 0, false
		}
		if st == rules.StateRcpt {
			return 1, true
		}
		return req.RecipientCount, req.RecipientCount > 0
	case rules.CountBytes:
		if st != rules.StateEOM {
			return 0, false
		}
		return req.Size, req.Size > 0
	}
	return 0, false
}

// peerOf is the client of a request as host masks match it.
func peerOf(req *PolicyRequest) hostmask.Peer {
	return hostmask.PeerAddr(req.ClientName, parseAddr(req.ClientAddress))
}

func parseAddr(s string) netip.Addr {
	a, _ := netip.ParseAddr(s)
	return a
}

func domainOf(addr string) string {
	if i := strings.LastIndexByte(addr, '@'); i >= 0 {
		return strings.ToLower(addr[i+1:])
	}
	return ""
}

func anyMask(ms []hostmask.Mask, p hostmask.Peer) bool {
	for _, m := range ms {
		if m.Match(p) {
			return true
		}
	}
	return false
}

func matchAddress(list []string, addr string) bool {
	if addr == "" {
		addr = "<>"
	}
	for _, a := range list {
		if strings.EqualFold(a, addr) {
			return true
		}
	}
	return false
}

func (g *Governor) policyMatches(r *PolicyRule, req *PolicyRequest, peer hostmask.Peer, class *string) bool {
	m := &r.Match
	if len(m.ProtocolState) > 0 && !slices.Contains(m.ProtocolState, req.ProtocolState) {
		return false
	}
	if len(m.ClientAddress) > 0 && !anyMask(m.ClientAddress, hostmask.Peer{Net: peer.Net}) {
		return false
	}
	if len(m.ClientName) > 0 && !anyMask(m.ClientName, hostmask.Peer{Name: req.ClientName}) {
		return false
	}
	if len(m.ReverseClientName) > 0 && !anyMask(m.ReverseClientName, hostmask.Peer{Name: req.ReverseClientName}) {
		return false
	}
	if len(m.HeloName) > 0 && !anyMask(m.HeloName, hostmask.Peer{Name: req.HeloName}) {
		return false
	}
	if len(m.Sender) > 0 && !matchAddress(m.Sender, req.Sender) {
		return false
	}
	if len(m.SenderDomain) > 0 && !anyMask(m.SenderDomain, hostmask.Peer{Name: domainOf(req.Sender)}) {
		return false
	}
	if len(m.Recipient) > 0 && !matchAddress(m.Recipient, req.Recipient) {
		return false
	}
	if len(m.RecipientDomain) > 0 && !anyMask(m.RecipientDomain, hostmask.Peer{Name: domainOf(req.Recipient)}) {
		return false
	}
	if len(m.SASLUsername) > 0 && !(req.SASLUsername != "" && (slices.Contains(m.SASLUsername, "*") || slices.Contains(m.SASLUsername, req.SASLUsername))) {
		return false
	}
	if len(m.PolicyContext) > 0 && !slices.Contains(m.PolicyContext, req.PolicyContext) {
		return false
	}
	if len(m.Class) > 0 && !slices.Contains(m.Class, g.policyClass(peer, class)) {
		return false
	}
	return true
}

// policyClass returns the client's class, computed once per request.
func (g *Governor) policyClass(peer hostmask.Peer, cache *string) string {
	if *cache == "" {
		*cache = g.classes.Match(peer).Name
	}
	return *cache
}

// policyKey builds the value part of a rule's key.
func policyKey(r *PolicyRule, req *PolicyRequest, g *Governor, peer hostmask.Peer, class *string) string {
	var b strings.Builder
	for i, k := range r.Key {
		if i > 0 {
			b.WriteByte('\x00')
		}
		b.WriteString(k.Attr)
		b.WriteByte('=')
		var v string
		switch k.Attr {
		case "sender_domain":
			v = domainOf(req.Sender)
		case "recipient_domain":
			v = domainOf(req.Recipient)
		case "class":
			v = g.policyClass(peer, class)
		default:
			v = req.attr(k.Attr)
		}
		b.WriteString(keyValue(k, v, peer.Net.Addr()))
	}
	return b.String()
}

// keyValue is the one normalisation of a key part's value, for
// policyKey and CanonicalKey: v is the value as a request gives it (the
// domain for sender_domain and recipient_domain), a the client's address
// (unmapped, without zone; invalid when unknown) for client_address.
// Addresses and domains are lower-cased; a client address is reduced to
// its network when the part has prefixes.
func keyValue(k KeyPart, v string, a netip.Addr) string {
	switch k.Attr {
	case "sender", "recipient", "sender_domain", "recipient_domain":
		return strings.ToLower(v)
	case "client_address":
		if k.V4Prefix > 0 && a.IsValid() {
			bits := k.V4Prefix
			if a.Is6() {
				bits = k.V6Prefix
			}
			p, _ := a.Prefix(bits)
			return p.String()
		}
	}
	return v
}

// keyText renders a key for people: "sender=a@b.example, client_address=...".
func keyText(key string) string { return strings.ReplaceAll(key, "\x00", ", ") }

// PolicyAction fills a rule's action template. Placeholders: {rule},
// {key}, {count}, {limit}, {period}, {algorithm}, {retry} (whole seconds,
// rounded up).
func PolicyAction(r *PolicyRule, key string, d limiter.Decision, lim limiter.Limit) string {
	retry := "later"
	if d.RetryAfter != limiter.Never {
		retry = strconv.FormatInt(int64((d.RetryAfter+time.Second-1)/time.Second), 10)
	}
	rep := strings.NewReplacer(
		"{rule}", r.Name,
		"{key}", keyText(key),
		"{count}", strconv.FormatInt(d.Count, 10),
		"{limit}", strconv.FormatInt(lim.N, 10),
		"{period}", limiter.FormatPeriod(lim.Period),
		"{algorithm}", lim.Algorithm.String(),
		"{retry}", retry,
	)
	return rep.Replace(r.Action)
}

// actionText strips the verb of an action: "DEFER_IF_PERMIT x" -> "x".
func actionText(a string) string {
	if _, rest, ok := strings.Cut(a, " "); ok {
		return rest
	}
	return a
}

// Table renders the rules as understood, for `sluice check`.
func (rs PolicyRules) Table() string {
	var b strings.Builder
	for i, r := range rs.Rules {
		limits := make([]string, len(r.Limits))
		for j, l := range r.Limits {
			limits[j] = l.String()
		}
		keys := make([]string, len(r.Key))
		for j, k := range r.Key {
			keys[j] = k.String()
		}
		fmt.Fprintf(&b, "%d. %s: count %s at %s per [%s], limits %s, %s", i+1, r.Name, r.Count, r.Stage, strings.Join(keys, " + "), strings.Join(limits, " and "), modeName(r.Mode))
		if r.DryRun {
			b.WriteString(", dry run (WARN)")
		}
		if r.Rollback {
			b.WriteString(", rolled back if the transaction is not finished")
		}
		fmt.Fprintf(&b, "\n   when over: %s\n", r.Action)
		if r.Table != nil {
			fmt.Fprintf(&b, "   per-key limits: %s (%d entries; key %s)\n", r.Table.Name(), r.Table.Len(), strings.Join(keys, ","))
		}
		if w := r.Match.describe(); w != "" {
			fmt.Fprintf(&b, "   applies to: %s\n", w)
		}
	}
	if len(rs.Rules) == 0 {
		b.WriteString("(no rules: every request gets " + rs.Default + ")\n")
	}
	return b.String()
}

func modeName(m limiter.Mode) string {
	if m == limiter.Strict {
		return "strict (refused attempts count)"
	}
	return "leaky (refused attempts do not count)"
}

func (m PolicyMatch) describe() string {
	var parts []string
	masks := func(name string, ms []hostmask.Mask) {
		if len(ms) > 0 {
			s := make([]string, len(ms))
			for i, x := range ms {
				s[i] = x.String()
			}
			parts = append(parts, name+" "+strings.Join(s, "|"))
		}
	}
	strs := func(name string, ss []string) {
		if len(ss) > 0 {
			parts = append(parts, name+" "+strings.Join(ss, "|"))
		}
	}
	strs("protocol_state", m.ProtocolState)
	masks("client_address", m.ClientAddress)
	masks("client_name", m.ClientName)
	masks("reverse_client_name", m.ReverseClientName)
	masks("helo_name", m.HeloName)
	strs("sender", m.Sender)
	masks("sender_domain", m.SenderDomain)
	strs("recipient", m.Recipient)
	masks("recipient_domain", m.RecipientDomain)
	strs("sasl_username", m.SASLUsername)
	strs("policy_context", m.PolicyContext)
	strs("class", m.Class)
	return strings.Join(parts, "; ")
}
