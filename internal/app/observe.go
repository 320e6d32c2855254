package app

import (
	"context"
	"time"

	"sluice/internal/ban"
	"sluice/internal/governor"
	"sluice/internal/throttle"
)

// deferSuspended records the deferral of a throttle sender whose key id
// is suspended (by a relay's ban, or by an administrator), a decision the
// throttle front end makes outside the governor, and returns the
// sender's answer: what the guard's deferral d says.
func (h throttleHandler) deferSuspended(ctx context.Context, g *governor.Governor, key string, d *ban.Deferral) error {
	text, reason := d.Error(), governor.ReasonSuspended
	if d.Banned {
		reason = governor.ReasonBan
	}
	policy, _, lim, _ := g.ThrottleTarget(key)
	g.Record(ctx, governor.Verdict{Door: "throttle", Rule: policy, Key: key, Limit: lim, Refused: true, Deferred: true,
		Reason: reason, Reply: "DEFER " + text, Msg: "throttle: deferred", Window: governor.SummaryEvery,
		Args: []any{"key", key, "reason", text}})
	return &throttle.DeferError{Reason: text}
}

// recordUntrusted records the answer to a result report from a peer not
// trusted to steer key id: the report changed nothing.
func (h throttleHandler) recordUntrusted(ctx context.Context, id, peer, answer string) {
	h.d.gov.Load().Record(ctx, governor.Verdict{Door: "throttle", Rule: "report", Key: id, Refused: true,
		Reason: governor.ReasonUntrusted, Reply: answer, Window: time.Minute,
		Msg:  "throttle: a report from a peer not trusted to steer the key changed nothing",
		Args: []any{"key", id, "peer", peer}})
}
