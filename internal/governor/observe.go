package governor

import (
	"time"

	"sluice/internal/limiter"
)

// Verdict is one decision with its explanation: what metrics count, and
// what the status page lists among top talkers and recent refusals.
type Verdict struct {
	Door string // "anvil", "policy", "milter", "throttle"
	// Rule is the policy rule or throttle policy, or "class" for a class's
	// session cap.
	Rule string
	// Key is what was counted: the rule's key, a class name, a throttle key.
	Key   string
	Count int64 // the count the decision saw
	// Limit is the limit decided against; for a session cap, N is the cap
	// and Period is 0.
	Limit limiter.Limit
	// Refused is true when the peer was refused or told to wait or defer;
	// DryRun when the refusal was only logged.
	Refused bool
	DryRun  bool
	// Reply is what the peer was told when refused.
	Reply string
	// At is when the decision was made.
	At time.Time
}

// Observer receives every verdict as it is made. It runs on the mail
// path: it must be quick and never block.
type Observer interface {
	Observe(v *Verdict)
}

// observe reports v to the observer, if there is one.
func (g *Governor) observe(v Verdict) {
	if g.obs == nil {
		return
	}
	if v.At.IsZero() {
		v.At = g.lim.Now()
	}
	g.obs.Observe(&v)
}

// sessionCap is the limit shown for a concurrency cap of n sessions.
func sessionCap(n int64) limiter.Limit { return limiter.Limit{N: n} }
