package governor

import (
	"context"
	"slices"
	"time"

	"sluice/internal/hostmask"
	"sluice/internal/limiter"
	"sluice/internal/rules"
)

// policyStep is one rule's part in a policy query, which a live query and
// a dry run answer alike (policyDecide).
type policyStep struct {
	r            *PolicyRule
	skip, skipAt string // why the rule does not count the query, and at what ("": it counts)
	key          string
	n            int64
	eff          Effective
	checks       []limiter.Check
	mode         limiter.Mode
	at           time.Time
	out          []limiter.Decision
	refused      int    // the refusing limit's index, or -1
	text         string // the refusal's action
	err          error  // the store's failure (out is then its fail mode's answer)
	failed       bool   // the store failed and its fail mode refuses
}

// ruleStep takes rule r's step for the query: whether it counts it,
// under which key and limits, and the limiter's decisions (hit, or peeked
// for a dry run). A rule counted once per SMTP session or transaction is
// noted so in ps.
func (g *Governor) ruleStep(ctx context.Context, ps *PolicySession, req *PolicyRequest, r *PolicyRule, peer hostmask.Peer, class *string, dry bool) policyStep {
	st := policyStep{r: r, refused: -1}
	if !g.policyMatches(r, req, peer, class) {
		st.skip = "no match"
		return st
	}
	n, ok := policyAmount(r, req, ps)
	if !ok {
		st.skip, st.skipAt = "not counted at ", req.ProtocolState
		return st
	}
	st.n, st.key = n, policyKey(r, req, g, peer, class)
	if st.eff = g.EffectiveLimits(r, st.key); st.eff.Exempt {
		return st
	}
	st.checks, st.mode = policyChecks(r, st.key, st.eff.Limits), r.Mode
	if r.DryRun {
		st.mode = limiter.Strict // a dry run lets the mail pass, so it counts
	}
	st.at = g.lim.Now()
	st.out, st.err = g.policyCount(ctx, n, st.mode, st.checks, dry)
	if st.failed = st.err != nil && !limiterAllows(st.out); st.failed {
		return st
	}
	st.refused = slices.IndexFunc(st.out, func(d limiter.Decision) bool { return !d.Allowed })
	if st.refused >= 0 {
		st.text = PolicyAction(r, st.key, st.out[st.refused], st.eff.Limits[st.refused])
	}
	if st.refused < 0 || r.DryRun {
		// rules.Counted once: per SMTP session, or per transaction at RCPT.
		switch {
		case r.Count == rules.CountConnections:
			ps.connCount = append(ps.connCount, r.Name)
		case r.Count == rules.CountMessages && req.ProtocolState == rules.StateRcpt:
			ps.counted = append(ps.counted, r.Name)
		}
	}
	return st
}

// policyEffects is what a live query does with a rule's step beside its
// answer: logs and observes it, keeps its hit for taking back (done, and
// the session), and on a refusal or a failure takes back what earlier
// rules counted for the mail (done), since it did not happen.
func (g *Governor) policyEffects(ctx context.Context, ps *PolicySession, req *PolicyRequest, st *policyStep, done []pendingHit) []pendingHit {
	r, key := st.r, st.key
	switch {
	case st.skip != "":
		return done
	case st.eff.Exempt:
		g.log.Debug("policy: exempt", "rule", r.Name, "key", keyText(key), "source", st.eff.Source)
		return done
	case st.failed:
		g.log.Warn("policy: limiter unavailable; failing closed", "rule", r.Name, "err", st.err)
		g.policyUndo(ctx, done)
		return done
	}
	limits, out, refused := st.eff.Limits, st.out, st.refused
	g.policyReport(ctx, r, req, key, st.n, limits, out, refused, st.at)
	done = policyPending(ps, r, req, pendingHit{checks: st.checks, n: st.n, at: st.at}, st.mode, refused, done)
	switch {
	case refused < 0:
	case r.DryRun:
		g.refused(ctx, "policy", r.Name+" (dry run)", keyText(key), limits[refused].Period,
			"policy: over the limit (dry run)", "rule", r.Name, "key", keyText(key), "count", out[refused].Count, "limit", limits[refused].String(), "source", st.eff.Source)
	default:
		g.refused(ctx, "policy", r.Name, keyText(key), limits[refused].Period,
			"policy: over the limit", "rule", r.Name, "key", keyText(key), "count", out[refused].Count,
			"limit", limits[refused].String(), "source", st.eff.Source, "retry_after", out[refused].RetryAfter.Round(time.Second).String(), "client", req.ClientAddress, "sender", req.Sender)
		g.policyUndo(ctx, done)
		if r.Count == rules.CountConnections {
			ps.connDeny = st.text
		}
	}
	return done
}
