package governor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"sluice/internal/limiter"
	"sluice/internal/limittable"
)

// Explanation is what a policy request would be answered and why, rule
// by rule (PolicyExplain).
type Explanation struct {
	Answer string     `json:"answer"`
	Rules  []RuleStep `json:"rules"`
}

// RuleStep is one rule's part in an explanation, or one key's state.
type RuleStep struct {
	Rule string `json:"rule"`
	Key  string `json:"key,omitempty"`
	// Outcome: "no match", "not counted at STAGE", "exempt", "ok",
	// "over", "over (dry run)"; for a key's state "" .
	Outcome string       `json:"outcome,omitempty"`
	N       int64        `json:"n,omitempty"` // what the request adds
	Limits  []LimitState `json:"limits,omitempty"`
	// Source says where the limits came from (Effective.Source).
	Source    string     `json:"source,omitempty"`
	Exemption *Exemption `json:"exemption,omitempty"`
}

// exemption is eff's live exemption, or nil.
func (eff Effective) exemption() *Exemption {
	if eff.Exemption.Rule == "" {
		return nil
	}
	x := eff.Exemption
	return &x
}

// LimitState is one limit of a key: its count, what is left, and when
// the key is admitted again (RetryAfter, when over) and fully drained
// (Reset).
type LimitState struct {
	Limit      string `json:"limit"`
	Count      int64  `json:"count"`
	Remaining  int64  `json:"remaining"`
	Over       bool   `json:"over,omitempty"`
	RetryAfter string `json:"retry_after,omitempty"`
	Reset      string `json:"reset,omitempty"`
}

// noteStep notes a rule's step of a dry run; a store failure ends the
// dry run (the error).
func (ex *Explanation) noteStep(st *policyStep) error {
	r, eff := st.r, st.eff
	s := RuleStep{Rule: r.Name, Key: keyText(st.key), Source: eff.Source, Exemption: eff.exemption()}
	switch {
	case st.skip != "":
		s = RuleStep{Rule: r.Name, Outcome: st.skip + st.skipAt}
	case eff.Exempt:
		s.Outcome = "exempt"
	case st.err != nil:
		return fmt.Errorf("peek rule %s: %w", r.Name, st.err)
	case st.refused >= 0 && r.DryRun:
		s.Outcome, s.N, s.Limits = "over (dry run)", st.n, limitStates(eff.Limits, st.out, st.n)
	case st.refused >= 0:
		s.Outcome, s.N, s.Limits = "over", st.n, limitStates(eff.Limits, st.out, st.n)
	default:
		s.Outcome, s.N, s.Limits = "ok", st.n, limitStates(eff.Limits, st.out, st.n)
	}
	ex.Rules = append(ex.Rules, s)
	return nil
}

// limitStates are the states of limits from a Peek of n: counts and
// what remains before the peeked events.
func limitStates(limits []limiter.Limit, out []limiter.Decision, n int64) []LimitState {
	ls := make([]LimitState, len(limits))
	for j, d := range out {
		ls[j] = LimitState{Limit: limits[j].String(), Count: d.Count, Remaining: d.Remaining, Over: !d.Allowed}
		if d.Allowed {
			ls[j].Remaining += n
		}
		if !d.Allowed {
			ls[j].RetryAfter = "never"
			if d.RetryAfter != limiter.Never {
				ls[j].RetryAfter = d.RetryAfter.Round(time.Second).String()
			}
		}
		if d.Reset > 0 {
			ls[j].Reset = d.Reset.Round(time.Second).String()
		}
	}
	return ls
}

// PolicyExplain returns what PolicyCheck would answer req, as the first
// request of a new connection, and why, rule by rule: the same decision,
// run dry (limits peeked, nothing counted, logged or observed).
func (g *Governor) PolicyExplain(ctx context.Context, req *PolicyRequest) (Explanation, error) {
	ex := &Explanation{}
	ans, err := g.policyDecide(ctx, &PolicySession{}, req, ex)
	ex.Answer = ans
	return *ex, err
}

// policyRule returns the rule named name.
func (g *Governor) policyRule(name string) (*PolicyRule, error) {
	for i := range g.policy.Rules {
		if g.policy.Rules[i].Name == name {
			return &g.policy.Rules[i], nil
		}
	}
	return nil, fmt.Errorf("no policy rule %q", name)
}

// PolicyKey returns the state of one rule's key (text form,
// "sender=a@b.example", made canonical by CanonicalKey): each limit's count and what one more event
// would get, and any exemption.
func (g *Governor) PolicyKey(ctx context.Context, rule, key string) (RuleStep, error) {
	r, k, err := g.RuleKey(rule, key)
	if err != nil {
		return RuleStep{}, err
	}
	return g.keyState(ctx, r, k)
}

func (g *Governor) keyState(ctx context.Context, r *PolicyRule, key string) (RuleStep, error) {
	eff := g.EffectiveLimits(r, key)
	s := RuleStep{Rule: r.Name, Key: keyText(key), Source: eff.Source, Exemption: eff.exemption()}
	if eff.Exempt {
		s.Outcome = "exempt"
		return s, nil
	}
	out := make([]limiter.Decision, len(eff.Limits))
	if err := g.lim.Peek(ctx, 1, policyChecks(r, key, eff.Limits), out); err != nil {
		return s, fmt.Errorf("peek %s %s: %w", r.Name, keyText(key), err)
	}
	s.Limits = limitStates(eff.Limits, out, 1)
	return s, nil
}

// maxListed bounds the keys one listing reads.
const maxListed = 10000

// PolicyKeys lists the keys the store holds for rule (every rule when
// ""), whose key text matches pattern ("" or "*": any; '*' matches any
// run of characters), with their state, fullest first. near > 0 keeps
// only keys at or above near percent of a limit.
func (g *Governor) PolicyKeys(ctx context.Context, rule, pattern string, near int) ([]RuleStep, error) {
	var out []RuleStep
	for i := range g.policy.Rules {
		r := &g.policy.Rules[i]
		if rule != "" && r.Name != rule {
			continue
		}
		keys, err := g.ruleKeys(ctx, r, pattern)
		if err != nil {
			return out, err
		}
		for _, k := range keys {
			s, err := g.keyState(ctx, r, k)
			if err != nil {
				return out, err
			}
			if near <= 0 || s.fullest() >= near {
				out = append(out, s)
			}
		}
	}
	if rule != "" && len(g.policy.Rules) > 0 {
		if _, err := g.policyRule(rule); err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(out, func(a, b RuleStep) int { return b.fullest() - a.fullest() })
	return out, nil
}

// fullest is the highest percentage of a limit the key has used.
func (s RuleStep) fullest() int {
	p := 0
	for _, l := range s.Limits {
		if n := l.Count + l.Remaining; n > 0 {
			p = max(p, int(l.Count*100/n))
		}
		if l.Over {
			p = max(p, 100)
		}
	}
	return p
}

// ruleKeys returns the keys (the store's form) the store holds for r
// that match pattern.
func (g *Governor) ruleKeys(ctx context.Context, r *PolicyRule, pattern string) ([]string, error) {
	prefix := "policy\x00{" + r.Name + "\x00"
	raw, err := g.lim.Keys(ctx, prefix, maxListed)
	if err != nil {
		return nil, fmt.Errorf("list keys of %s: %w", r.Name, err)
	}
	seen := map[string]bool{}
	var keys []string
	for _, k := range raw {
		i := strings.LastIndex(k, "}\x00")
		if i < len(prefix) {
			continue
		}
		key := k[len(prefix):i]
		if !seen[key] && Glob(pattern, keyText(key)) {
			seen[key] = true
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	return keys, nil
}

// PolicyReset forgets the counts of rule's keys matching pattern (a key
// in text form, made canonical by CanonicalKey, or a pattern with '*'
// matched against the stored keys' text) and returns the keys reset.
func (g *Governor) PolicyReset(ctx context.Context, rule, pattern string) ([]string, error) {
	r, err := g.policyRule(rule)
	if err != nil {
		return nil, err
	}
	var keys []string
	if strings.Contains(pattern, "*") {
		if keys, err = g.ruleKeys(ctx, r, pattern); err != nil {
			return nil, err
		}
	} else {
		k, err := CanonicalKey(r, pattern)
		if err != nil {
			return nil, err
		}
		keys = []string{k}
	}
	var ids []string
	for _, k := range keys {
		// Every index a limit of the rule or of a table entry may
		// have had: a reload may have dropped some.
		for j := range max(len(r.Limits), limittable.MaxLimits) {
			ids = append(ids, policyStoreKey(r.Name, k)+fmt.Sprintf("\x00%d", j))
		}
	}
	n, err := g.lim.Forget(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("reset %s: %w", rule, err)
	}
	texts := make([]string, 0, len(keys))
	for _, k := range keys {
		texts = append(texts, keyText(k))
	}
	if n == 0 {
		texts = texts[:0]
	}
	return texts, nil
}

// Glob reports whether s matches pattern, where '*' matches any run of
// characters and everything else itself; "" matches anything.
func Glob(pattern, s string) bool {
	if pattern == "" {
		return true
	}
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return s == pattern
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return strings.HasSuffix(s, last)
}
