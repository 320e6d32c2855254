package governor

import (
	"fmt"
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
	// Source says where the choice came from: "rule" (its limit list), or
	// "FILE:LINE" of the table entry.
	Source string
}

// EffectiveLimits is the one place where the limit for (rule, key) is
// chosen; key is the value part of the rule's store key, as policyKey
// builds it. The entry of the rule's table for the key wins (its limits,
// or an exemption); otherwise the rule's own limits apply.
//
// Limit i of an entry is counted under the same store key as limit i of
// the rule: an entry that keeps the rule's algorithm and period and
// raises or lowers N keeps the key's count (a sender at 10 of 10 that an
// entry raises to 20 may send 10 more); one with another algorithm or
// period starts a fresh count, as any rule change does.
func (g *Governor) EffectiveLimits(r *PolicyRule, key string) Effective {
	if r.Table != nil {
		if e, ok := r.Table.Lookup(TableKey(key)); ok {
			src := fmt.Sprintf("%s:%d", r.Table.Name(), e.Line)
			if e.Exempt {
				return Effective{Exempt: true, Source: src}
			}
			return Effective{Limits: e.Limits, Source: src}
		}
	}
	return Effective{Limits: r.Limits, Source: "rule"}
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

// PolicyLimits returns the limits the rule named rule applies to key as
// verdicts show it (keyText: "sender=a@b.example, ..."), for the status
// page after a reload; ok is false when no such rule is in force or the
// key is now exempt.
func (g *Governor) PolicyLimits(rule, key string) (limits []limiter.Limit, ok bool) {
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
