package governor

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"sluice/internal/limiter"
)

// Verdict is one decision with its explanation. Every decision of every
// door is recorded once, through Record: the one record feeds the log
// (the refusal log's bounded lines, a debug line for each), the metrics,
// and the status page's top talkers and recent refusals.
type Verdict struct {
	Door string // "anvil", "policy", "milter", "throttle"
	// Rule is the policy rule or throttle policy, or "class" for a class's
	// session cap, or "report" for a throttle result report.
	Rule string
	// Key is what was counted: the rule's key, a class name, a throttle key.
	Key string
	// Client is the SMTP client's address of a session decision at the
	// anvil or milter door (invalid when unknown or for other decisions).
	Client netip.Addr
	Count  int64 // the count the decision saw
	// Limit is the limit decided against; for a session cap, N is the cap
	// and Period is 0.
	Limit limiter.Limit
	// Refused is true when the peer was refused or told to wait or defer;
	// DryRun when the refusal was only logged; Deferred when the peer was
	// told to come back later with the mail still queued (the throttle).
	Refused  bool
	DryRun   bool
	Deferred bool
	// Reason says why, in one word of the Reason* constants.
	Reason string
	// Reply is what the peer was told when refused.
	Reply string
	// At is when the decision was made.
	At time.Time

	// Msg and Args make the decision's log line (Msg empty: "decision").
	// A refusal's line goes through the refusal log, bounded per door,
	// rule and key over Window.
	Msg    string
	Args   []any
	Window time.Duration
}

// Why a verdict was given: the Reason of a Verdict.
const (
	ReasonLimit      = "limit"            // the count against a limit
	ReasonClass      = "class"            // a class's session cap
	ReasonReserve    = "reserve"          // the free sessions are reserved for other classes
	ReasonShare      = "share"            // the network holds its fair share of the sessions under pressure
	ReasonHeadroom   = "headroom"         // past the share budget, the network holds a session or was busy in the last minute
	ReasonMaxWait    = "max_wait"         // no throttle slot within the policy's max_wait
	ReasonBan        = "ban"              // the key is suspended after the relay banned it
	ReasonSuspended  = "suspended"        // an administrator suspended the key
	ReasonExempt     = "exempt"           // an exemption let the request pass uncounted
	ReasonFailOpen   = "fail_open"        // the store could not decide; fail_mode open admitted
	ReasonFailClosed = "fail_closed"      // the store could not decide; fail_mode closed refused
	ReasonUntrusted  = "untrusted_report" // a result report from a peer not trusted to steer the key
)

// Word is the verdict's word, as sluice_decisions_total's verdict label
// and the log's verdict attribute say it.
func (v *Verdict) Word() string {
	switch {
	case v.Refused && v.DryRun:
		return "dry_run"
	case v.Refused && v.Deferred:
		return "deferred" // told not to send now: the mail waits in the queue
	case v.Refused:
		return "refused"
	}
	return "ok"
}

// Observer receives every verdict as it is made, a copy each (by value:
// a pointer through the interface would put every decision's record on
// the heap). It runs on the mail path: it must be quick and never block.
type Observer interface {
	Observe(v Verdict)
}

// Record is the one recording point of a decision: it reports v to the
// observer, if there is one, and logs it: a refusal through the refusal
// log (bounded), any verdict at debug level. Front ends that decide
// outside the governor (a throttle key's suspension) record here too.
func (g *Governor) Record(ctx context.Context, v Verdict) {
	if v.At.IsZero() {
		v.At = g.lim.Now()
	}
	if g.obs != nil {
		g.obs.Observe(v)
	}
	g.logVerdict(ctx, &v)
}

// observe records v (the governor's own decisions).
func (g *Governor) observe(ctx context.Context, v Verdict) { g.Record(ctx, v) }

// logVerdict writes v's log line: a refusal's through the refusal log,
// an admission's at debug level only.
func (g *Governor) logVerdict(ctx context.Context, v *Verdict) {
	if !v.Refused && !g.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	msg := v.Msg
	if msg == "" {
		msg = v.Door + ": decision"
	}
	args := make([]any, 0, len(v.Args)+8)
	args = append(args, v.Args...)
	args = append(args, "door", v.Door, "verdict", v.Word())
	if v.Reason != "" {
		args = append(args, "reason", v.Reason)
	}
	if !v.Refused {
		args = append(args, "rule", v.Rule, "key", v.Key)
		g.log.Debug(msg, args...)
		return
	}
	rule := v.Rule
	if v.DryRun {
		rule += " (dry run)"
	}
	g.refused(ctx, v.Door, rule, v.Key, v.Window, msg, args...)
}

// failMode records a decision the store could not make, answered by the
// fail mode: refused (fail_mode closed) or admitted. key is what would
// have been counted (a class name, a throttle key);
// args add to its log line.
func (g *Governor) failMode(ctx context.Context, door, key string, refused bool, reply string, err error, args ...any) {
	v := Verdict{Door: door, Rule: "fail_mode", Key: key, Refused: refused, Deferred: refused && door == "throttle",
		Reason: ReasonFailOpen, Reply: reply, Window: SummaryEvery, Args: append(args, "err", err),
		Msg: door + ": the store cannot decide; admitted (fail_mode open)"}
	if refused {
		v.Reason, v.Msg = ReasonFailClosed, door+": the store cannot decide; refused (fail_mode closed)"
	}
	g.Record(ctx, v)
}

// sessionCap is the limit shown for a concurrency cap of n sessions.
func sessionCap(n int64) limiter.Limit { return limiter.Limit{N: n} }
