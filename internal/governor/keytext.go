package governor

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// StoreKeyText renders a store key for people, in the words of the
// configuration that made it:
//
//	rule sender-rate: sender=a@b.example (the rule's 1st limit)
//	anvil connections of smtp:192.0.2.1
//	anvil rates of smtp:192.0.2.1
//	class local
//	throttle relay-a, bucket relay.example: sessions | bookings
//
// A key of another shape has its parts joined by ", ".
func StoreKeyText(key string) string {
	parts := strings.Split(key, "\x00")
	switch {
	case parts[0] == "policy" && len(parts) >= 4 && strings.HasPrefix(parts[1], "{") && strings.HasSuffix(parts[len(parts)-2], "}"):
		name := strings.TrimPrefix(parts[1], "{")
		attrs := parts[2 : len(parts)-1]
		attrs[len(attrs)-1] = strings.TrimSuffix(attrs[len(attrs)-1], "}")
		text := "rule " + name + ": " + strings.Join(attrs, ", ")
		if j, err := strconv.Atoi(parts[len(parts)-1]); err == nil {
			text += " (the rule's " + ordinal(j+1) + " limit)"
		}
		return text
	case parts[0] == "anvil" && len(parts) == 3 && parts[1] == "c":
		return "anvil connections of " + parts[2]
	case parts[0] == "anvil" && len(parts) == 3 && parts[1] == "r":
		return "anvil rates of " + parts[2]
	case parts[0] == "class" && len(parts) == 2:
		return "class " + parts[1]
	case parts[0] == "throttle" && len(parts) == 4 && (parts[1] == "c" || parts[1] == "r"):
		what := "sessions"
		if parts[1] == "r" {
			what = "bookings"
		}
		return "throttle " + parts[2] + ", bucket " + parts[3] + ": " + what
	}
	return strings.Join(parts, ", ")
}

// CanonicalKey turns a key of rule r as a person types it
// ("sender=Alice@Example.com", "client_address=192.0.2.7, sasl_username=u")
// into the store's form that r's decisions count under: the attribute
// names must be r's key parts (in any order, each once), and the values
// are normalised as policyKey does (keyValue: lower-cased addresses and
// domains; a client address reduced to the rule's network, which may also
// be typed as that network). A key that does not fit r is an error naming
// r's key parts.
func CanonicalKey(r *PolicyRule, text string) (string, error) {
	parts := r.keyParts()
	bad := func(why string, a ...any) error {
		return fmt.Errorf("key %q of rule %s: %s (the rule counts by %s)", text, r.Name, fmt.Sprintf(why, a...), parts)
	}
	if strings.ContainsRune(text, '\x00') {
		return "", bad("a NUL in it")
	}
	vals := make([]string, len(r.Key))
	seen := make([]bool, len(r.Key))
	fields := strings.Split(text, ",")
	if len(fields) != len(r.Key) {
		return "", bad("%d part(s), not %d", len(fields), len(r.Key))
	}
	for _, f := range fields {
		name, v, ok := strings.Cut(strings.TrimSpace(f), "=")
		i := slices.IndexFunc(r.Key, func(k KeyPart) bool { return k.Attr == name })
		switch {
		case !ok:
			return "", bad("%q is not attribute=value", strings.TrimSpace(f))
		case i < 0:
			return "", bad("no key part %q", name)
		case seen[i]:
			return "", bad("%s given twice", name)
		}
		seen[i] = true
		k := r.Key[i]
		if k.Attr == "client_address" && k.V4Prefix > 0 {
			a, err := keyNetwork(k, v)
			if err != nil {
				return "", bad("%v", err)
			}
			vals[i] = k.Attr + "=" + keyValue(k, v, a)
			continue
		}
		vals[i] = k.Attr + "=" + keyValue(k, v, netip.Addr{})
	}
	return strings.Join(vals, "\x00"), nil
}

// keyNetwork is the address of v, a client address or (for a part with
// prefixes) the network it falls in, as keyValue takes it.
func keyNetwork(k KeyPart, v string) (netip.Addr, error) {
	if !strings.Contains(v, "/") {
		a, err := netip.ParseAddr(v)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("client_address %q is not an address", v)
		}
		return a.Unmap().WithZone(""), nil
	}
	p, err := netip.ParsePrefix(v)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("client_address %q is not an address or network", v)
	}
	bits := k.V4Prefix
	if p.Addr().Is6() {
		bits = k.V6Prefix
	}
	if p.Bits() != bits {
		return netip.Addr{}, fmt.Errorf("client_address %s is not a /%d network", v, bits)
	}
	return p.Addr(), nil
}

// keyParts names r's key parts as configured: "sender, client_address/24/64".
func (r *PolicyRule) keyParts() string {
	s := make([]string, len(r.Key))
	for i, k := range r.Key {
		s[i] = k.String()
	}
	return strings.Join(s, ", ")
}

// RuleKey is CanonicalKey for the rule named rule; the rule is nil when
// none of that name is in force.
func (g *Governor) RuleKey(rule, text string) (*PolicyRule, string, error) {
	r, err := g.policyRule(rule)
	if err != nil {
		return nil, "", err
	}
	k, err := CanonicalKey(r, text)
	return r, k, err
}

// ordinal is n as "1st", "2nd", "3rd", "4th" ... ("11th", "12th", "13th").
func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return strconv.Itoa(n) + suffix
}
