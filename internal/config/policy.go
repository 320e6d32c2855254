package config

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"sluice/internal/hostmask"
	"sluice/internal/limittable"
	"sluice/internal/postfixattr"
	"sluice/internal/rules"
)

// PolicyRuleSpec is a policy rule with every field parsed and checked:
// each field is named after the [[policy.rule]] key it comes from
// (ClientAddress from client_address, Limits from limit; docs/config.md
// gives their meaning), with masks, limits, count and mode parsed.
type PolicyRuleSpec struct {
	Name              string
	ClientAddress     []hostmask.Mask
	ClientName        []hostmask.Mask
	ReverseClientName []hostmask.Mask
	HeloName          []hostmask.Mask
	Sender            []string
	SenderDomain      []hostmask.Mask
	Recipient         []string
	RecipientDomain   []hostmask.Mask
	SASLUsername      []string
	PolicyContext     []string
	ProtocolState     []string
	Class             []string
	Key               []KeySpec
	Count             rules.Counted
	Stage             string
	Limits            []rules.Limit
	Mode              rules.Mode
	Action            string
	DryRun            bool
	Rollback          bool
	Table             *limittable.Table // nil without a table
}

// KeySpec is one part of a rule's key: an attribute, or client_address
// reduced to a network ("client_address/24/64": /24 for IPv4, /64 for IPv6).
type KeySpec struct {
	Attr     string // the attribute's Postfix name, or a derived one
	V4Prefix int    // for client_address: 0 keeps the address
	V6Prefix int    // for client_address, with V4Prefix set
}

// derivedKeys are key parts computed from attributes.
var derivedKeys = []string{"sender_domain", "recipient_domain", "class"}

var placeholder = regexp.MustCompile(`\{[^}]*\}`)

var placeholders = []string{"{rule}", "{key}", "{count}", "{limit}", "{period}", "{algorithm}", "{retry}"}

// actionVerbs are the access(5) results a limit may answer with.
var actionVerbs = []string{"DEFER_IF_PERMIT", "DEFER_IF_REJECT", "DEFER", "REJECT", "HOLD", "DISCARD", "WARN", "INFO"}

// PolicyRules parses and checks the [[policy.rule]] tables.
func (c *Config) PolicyRules() ([]PolicyRuleSpec, []error) {
	var out []PolicyRuleSpec
	var errs []error
	seen := map[string]bool{}
	classNames := map[string]bool{}
	if specs, _ := c.ClassTable(); specs != nil {
		for _, s := range specs {
			classNames[s.Name] = true
		}
	}
	for i, r := range c.Policy.Rules {
		spec, rerrs := c.policyRule(fmt.Sprintf("policy.rule[%d]", i+1), r, seen, classNames)
		errs = append(errs, rerrs...)
		out = append(out, spec)
	}
	if err := checkAction(c.Policy.DefaultAction); err != nil && c.Policy.DefaultAction != "DUNNO" && c.Policy.DefaultAction != "OK" {
		errs = append(errs, c.errAt("policy.default_action", "%v", err))
	}
	return out, errs
}

// policyRule parses and checks one [[policy.rule]] at path; seen holds
// the names of the rules before it, classNames the classes.
func (c *Config) policyRule(path string, r PolicyRule, seen, classNames map[string]bool) (PolicyRuleSpec, []error) {
	var errs []error
	add := func(field, format string, args ...any) {
		p := path
		if field != "" {
			p += "." + field
		}
		errs = append(errs, c.errAt(p, format, args...))
	}
	spec := PolicyRuleSpec{Name: r.Name, Sender: lower(r.Sender), Recipient: lower(r.Recipient),
		SASLUsername: r.SASLUsername, PolicyContext: r.PolicyContext, DryRun: r.DryRun, Rollback: r.Rollback}
	switch {
	case r.Name == "":
		add("name", "every rule needs a name (it is part of its keys and of log lines)")
	case seen[r.Name]:
		add("name", "rule %q defined twice", r.Name)
	case strings.ContainsAny(r.Name, "\x00\n"):
		add("name", "control characters are not allowed")
	}
	seen[r.Name] = true
	masks := func(field string, in []string, wantNet bool) []hostmask.Mask {
		return ruleMasks(field, in, wantNet, add)
	}
	spec.ClientAddress = masks("client_address", r.ClientAddress, true)
	spec.ClientName = masks("client_name", r.ClientName, false)
	spec.ReverseClientName = masks("reverse_client_name", r.ReverseClientName, false)
	spec.HeloName = masks("helo_name", r.HeloName, false)
	spec.SenderDomain = masks("sender_domain", r.SenderDomain, false)
	spec.RecipientDomain = masks("recipient_domain", r.RecipientDomain, false)
	for j, st := range r.ProtocolState {
		up := strings.ToUpper(st)
		if !slices.Contains(postfixattr.States, up) {
			add(fmt.Sprintf("protocol_state[%d]", j+1), "%q is not a Postfix protocol state (%s)", st, strings.Join(postfixattr.States, ", "))
		}
		spec.ProtocolState = append(spec.ProtocolState, up)
	}
	for j, cl := range r.Class {
		if !classNames[cl] {
			add(fmt.Sprintf("class[%d]", j+1), "no class named %q", cl)
		}
	}
	spec.Class = r.Class
	// What is counted, where.
	count, err := rules.ParseCounted(r.Count)
	if err != nil {
		add("count", "%v", err)
	} else {
		spec.Count = count
		if spec.Stage, err = rules.ParseStage(count, r.Stage); err != nil {
			add("stage", "%v", err)
		}
	}
	if r.Rollback && spec.Stage != rules.StateRcpt {
		add("rollback", "rollback takes back counts made at RCPT; this rule counts at %s", orText(spec.Stage, "the first query"))
	}
	// Key.
	if len(r.Key) == 0 {
		add("key", "a rule needs a key, e.g. [\"sender\"] or [\"client_address/24/64\"]")
	}
	for j, k := range r.Key {
		ks, err := parseKey(k)
		if err != nil {
			add(fmt.Sprintf("key[%d]", j+1), "%v", err)
			continue
		}
		spec.Key = append(spec.Key, ks)
	}
	c.ruleLimits(&spec, r, add)
	if spec.Mode, err = rules.ParseMode(r.Mode); err != nil {
		add("mode", "%v", err)
	}
	spec.Action = r.Action
	if spec.Action == "" {
		spec.Action = rules.DefaultPolicyAction
	}
	if err := checkAction(spec.Action); err != nil {
		add("action", "%v", err)
	}
	return spec, errs
}

// ruleLimits parses a rule's limit list and reads its table into spec.
func (c *Config) ruleLimits(spec *PolicyRuleSpec, r PolicyRule, add func(field, format string, args ...any)) {
	if len(r.Limit) == 0 {
		add("limit", "a rule needs at least one limit, e.g. [\"10/60s exact\"]")
	}
	for j, ls := range r.Limit {
		l, err := rules.ParseLimit(ls)
		if err != nil {
			add(fmt.Sprintf("limit[%d]", j+1), "%v", err)
			continue
		}
		if err := limitCheck(spec.Count)(l); err != nil {
			add(fmt.Sprintf("limit[%d]", j+1), "%v", err)
			continue
		}
		spec.Limits = append(spec.Limits, l)
	}
	if r.Table != "" {
		var terrs []error
		spec.Table, terrs = c.limitTable(r.Table, spec.Count)
		for _, e := range terrs {
			add("table", "%v", e)
		}
	}
}

// ruleMasks parses a matcher's host masks; wantNet wants networks
// (client_address), otherwise names. add reports a bad one.
func ruleMasks(field string, in []string, wantNet bool, add func(field, format string, args ...any)) []hostmask.Mask {
	var ms []hostmask.Mask
	for j, s := range in {
		m, err := hostmask.Parse(s)
		if err != nil {
			add(fmt.Sprintf("%s[%d]", field, j+1), "%v", err)
			continue
		}
		if wantNet && m.Kind() != hostmask.Network && !m.IsAny() {
			add(fmt.Sprintf("%s[%d]", field, j+1), "%q is not an address or network", s)
			continue
		}
		if !wantNet && m.Kind() == hostmask.Network {
			add(fmt.Sprintf("%s[%d]", field, j+1), "%q is a network; names are matched here (use client_address for networks)", s)
			continue
		}
		ms = append(ms, m)
	}
	return ms
}

func orText(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

func lower(in []string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = strings.ToLower(s)
	}
	return out
}

func parseKey(k string) (KeySpec, error) {
	name, rest, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		if !postfixattr.Known(k) && !slices.Contains(derivedKeys, k) {
			return KeySpec{}, fmt.Errorf("%q is not a Postfix policy attribute or one of %s", k, strings.Join(derivedKeys, ", "))
		}
		return KeySpec{Attr: k}, nil
	}
	if name != "client_address" {
		return KeySpec{}, fmt.Errorf("%q: only client_address takes a prefix length", k)
	}
	v4s, v6s, hasV6 := strings.Cut(rest, "/")
	v4, err := strconv.Atoi(v4s)
	if err != nil || v4 < 1 || v4 > 32 {
		return KeySpec{}, fmt.Errorf("%q: IPv4 prefix length must be 1..32", k)
	}
	v6 := 64
	if hasV6 {
		if v6, err = strconv.Atoi(v6s); err != nil || v6 < 1 || v6 > 128 {
			return KeySpec{}, fmt.Errorf("%q: IPv6 prefix length must be 1..128", k)
		}
	}
	return KeySpec{Attr: name, V4Prefix: v4, V6Prefix: v6}, nil
}

// checkAction accepts an access(5) result that refuses or warns: a verb
// with optional text, or a 4NN/5NN code with text; placeholders must be
// known.
func checkAction(a string) error {
	if strings.ContainsAny(a, "\r\n\x00") {
		return fmt.Errorf("an action is one line")
	}
	verb, _, _ := strings.Cut(a, " ")
	code, err := strconv.Atoi(verb)
	switch {
	case err == nil && len(verb) == 3 && (code/100 == 4 || code/100 == 5):
	case slices.Contains(actionVerbs, verb):
	default:
		return fmt.Errorf("%q: an action starts with %s, or a 4NN/5NN code", a, strings.Join(actionVerbs, ", "))
	}
	for _, p := range placeholder.FindAllString(a, -1) {
		if !slices.Contains(placeholders, p) {
			return fmt.Errorf("unknown placeholder %s (known: %s)", p, strings.Join(placeholders, " "))
		}
	}
	return nil
}

func (c *Config) validatePolicy() []error {
	p := c.Policy
	_, errs := c.PolicyRules()
	if !p.Enabled {
		return errs
	}
	add := func(path, format string, args ...any) { errs = append(errs, c.errAt(path, format, args...)) }
	errs = append(errs, p.Door.validate(c, "policy", "max_conns", p.MaxConns)...)
	if p.IdleTimeout.D() < 0 || p.RequestTimeout.D() <= 0 {
		add("policy", "idle_timeout must not be negative and request_timeout must be positive")
	}
	if p.MaxLine < 256 || p.MaxLine > 1<<20 {
		add("policy.max_line", "must be between 256 and 1048576")
	}
	if p.MaxAttrs < 40 || p.MaxAttrs > 10000 {
		add("policy.max_attrs", "must be between 40 (Postfix sends about 30) and 10000")
	}
	if p.MaxRequest < p.MaxLine || p.MaxRequest > 16<<20 {
		add("policy.max_request", "must be at least max_line and at most 16 MiB")
	}
	return errs
}
