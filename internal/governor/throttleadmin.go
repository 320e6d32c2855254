package governor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"sluice/internal/limiter"
)

// ThrottleKeyState is what the throttle holds for one key: its policy
// and budget, the senders sending and waiting for a concurrency slot on
// this daemon, the sends booked in the window and when the next free
// slot is.
type ThrottleKeyState struct {
	Key    string `json:"key"`
	Policy string `json:"policy"`
	Bucket string `json:"bucket"`
	Limit  string `json:"limit"` // in force: a learned limit (WithThrottleCap) if lower
	// Configured is the policy's limit.
	Configured string `json:"configured"`
	Sending    int64  `json:"sending"` // concurrency slots held (every daemon, with Redis)
	Waiting    int    `json:"waiting"` // senders in line for one, on this daemon
	Booked     int64  `json:"booked"`  // send slots booked in the window
	// NextSlot is when a sender asking now would be given its slot.
	NextSlot time.Time `json:"next_slot"`
}

// ThrottleBudget returns the state of the named policy's budget bucket
// (a key, or "*" for a shared policy), under the cap ctx carries
// (WithThrottleCap) as ThrottleAcquire books; ok is false when no policy
// has that name.
func (g *Governor) ThrottleBudget(ctx context.Context, policy, bucket string) (ThrottleKeyState, bool, error) {
	var p *ThrottlePolicy
	for i := range g.throttle.Policies {
		if g.throttle.Policies[i].Name == policy {
			p = &g.throttle.Policies[i]
		}
	}
	if p == nil {
		return ThrottleKeyState{Key: bucket}, false, nil
	}
	st := ThrottleKeyState{Key: bucket, Policy: p.Name, Bucket: bucket, Limit: p.Limit.String(), Configured: p.Limit.String()}
	ckey := "throttle\x00c\x00" + p.Name + "\x00" + bucket
	st.Waiting = g.waiters.Waiting(ckey)
	held, err := g.lim.Held(ctx, ckey)
	if err != nil {
		return st, true, fmt.Errorf("throttle %s %s: %w", policy, bucket, err)
	}
	st.Sending = held
	lim := p.Limit
	if n, _ := ctx.Value(throttleCapKey{}).(int64); n > 0 && n < lim.N {
		lim.N = n
		st.Limit = lim.String()
	}
	lim.Period += p.Margin
	out := make([]limiter.Decision, 1)
	if err := g.lim.Peek(ctx, 1, []limiter.Check{{Key: "throttle\x00r\x00" + p.Name + "\x00" + bucket, Limit: lim}}, out); err != nil {
		return st, true, fmt.Errorf("throttle %s %s: %w", policy, bucket, err)
	}
	st.Booked, st.NextSlot = out[0].Count, g.lim.Now()
	if !out[0].Allowed && out[0].RetryAfter != limiter.Never {
		st.NextSlot = st.NextSlot.Add(out[0].RetryAfter)
	}
	return st, true, nil
}

// ThrottleKeys returns the keys the throttle holds state for (booked
// slots or concurrency slots), as their policies' budgets name them:
// "POLICY BUCKET", sorted.
func (g *Governor) ThrottleKeys(ctx context.Context) ([]string, error) {
	var ids []string
	for _, prefix := range []string{"throttle\x00r\x00", "throttle\x00c\x00"} {
		keys, err := g.lim.Keys(ctx, prefix, maxListed)
		if err != nil {
			return nil, fmt.Errorf("throttle keys: %w", err)
		}
		for _, k := range keys {
			ids = append(ids, strings.Replace(k[len(prefix):], "\x00", " ", 1))
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// PolicyRequestKeys returns the state of every key a policy request
// touches: one per rule that matches it, at whatever stage it counts.
func (g *Governor) PolicyRequestKeys(ctx context.Context, req *PolicyRequest) ([]RuleStep, error) {
	var out []RuleStep
	var class string
	peer := peerOf(req)
	for i := range g.policy.Rules {
		r := &g.policy.Rules[i]
		if !g.policyMatches(r, req, peer, &class) {
			continue
		}
		s, err := g.keyState(ctx, r, policyKey(r, req, g, peer, &class))
		if err != nil {
			return out, err
		}
		out = append(out, s)
	}
	return out, nil
}
