package governor

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"sluice/internal/limiter"
)

// Effective is the limit a policy rule applies to one key, and why.
type Effective struct {
	// Limits are checked together, as a rule's limit list is; nil when
	// Exempt. Shared with the rule or its table: do not modify.
	Limits []limiter.Limit
	// Exempt lets the key through the rule, uncounted.
	Exempt bool
	// Source says where the choice came from: "rule" (its limit list),
	// "FILE:LINE" of the table entry, "exemption" (a live exemption lets
	// the key through), or either of the first two followed by
	// " + exemption" (a live exemption raises it).
	Source string
	// Exemption is the live exemption that applies (sluice exempt), if
	// any: Rule is "" when none does.
	Exemption Exemption
}

// EffectiveLimits is the one place where the limit for (rule, key) is
// chosen; key is the value part of the rule's store key, as policyKey
// builds it. Every decision, explanation and look-up asks here, so that
// they agree. The entry of the rule's table for the key wins over the
// rule's own limits (its limits, or an exemption); then a live exemption
// (sluice exempt) lets the key through, or raises what applies by its
// amount.
//
// Limit i of an entry is counted under the same store key as limit i of
// the rule (the key holds the rule and the index, not the limit): an
// entry that keeps the rule's algorithm keeps the key's count whatever
// its N or period (a sender at 10 of 10 that an entry raises to 20 may
// send 10 more); only one with another algorithm starts a fresh count,
// the store dropping state kept for another algorithm.
func (g *Governor) EffectiveLimits(r *PolicyRule, key string) Effective {
	eff := Effective{Limits: r.Limits, Source: "rule"}
	if r.Table != nil {
		if e, ok := r.Table.Lookup(TableKey(key)); ok {
			eff.Source = fmt.Sprintf("%s:%d", r.Table.Name(), e.Line)
			eff.Limits, eff.Exempt = e.Limits, e.Exempt
			if e.Exempt {
				eff.Limits = nil
			}
		}
	}
	if g.exempt.empty() {
		return eff
	}
	x, ok := g.exempt.lookup(r.Name, key, g.lim.Now())
	if !ok {
		return eff
	}
	eff.Exemption = x
	switch {
	case x.Through:
		eff.Limits, eff.Exempt, eff.Source = nil, true, "exemption"
	case !eff.Exempt:
		raised := slices.Clone(eff.Limits)
		for i := range raised {
			raised[i].N = raiseBy(raised[i].N, x.Raise)
		}
		eff.Limits, eff.Source = raised, eff.Source+" + exemption"
	}
	return eff
}

// MaxRaise is the largest raise an exemption may give (sluice exempt
// add -raise).
const MaxRaise = 1_000_000_000

// raiseBy is n raised by r, saturating at math.MaxInt64 (a raise read
// from shared marks is not bounded by MaxRaise).
func raiseBy(n, r int64) int64 {
	if r > 0 && n > math.MaxInt64-r {
		return math.MaxInt64
	}
	return n + r
}

// TableKey is what a rule's key is looked up as in its table: the key's
// values without their attribute names, joined by "," ("sender=a@b.example"
// is "a@b.example"; "sasl_username=u\x00client_address=192.0.2.1" is
// "u,192.0.2.1").
func TableKey(key string) string {
	if !strings.ContainsRune(key, '\x00') {
		_, v, _ := strings.Cut(key, "=")
		return v
	}
	parts := strings.Split(key, "\x00")
	for i, p := range parts {
		_, parts[i], _ = strings.Cut(p, "=")
	}
	return strings.Join(parts, ",")
}

// RuleKeyLimits returns the limits the rule named rule applies to key as
// verdicts show it (keyText: "sender=a@b.example, ..."), for the status
// page after a reload; ok is false when no such rule is in force or the
// key is now exempt.
func (g *Governor) RuleKeyLimits(rule, key string) (limits []limiter.Limit, ok bool) {
	for i := range g.policy.Rules {
		r := &g.policy.Rules[i]
		if r.Name != rule {
			continue
		}
		eff := g.EffectiveLimits(r, strings.ReplaceAll(key, ", ", "\x00"))
		return eff.Limits, !eff.Exempt
	}
	return nil, false
}
