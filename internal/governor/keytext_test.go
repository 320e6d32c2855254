package governor

import (
	"strings"
	"testing"
)

func TestStoreKeyText(t *testing.T) {
	for key, want := range map[string]string{
		"policy\x00{sender-rate\x00sender=counted@example.org}\x000":            "rule sender-rate: sender=counted@example.org (the rule's 1st limit)",
		"policy\x00{per-net\x00client_address=192.0.2.0/24\x00sender=a@b}\x001": "rule per-net: client_address=192.0.2.0/24, sender=a@b (the rule's 2nd limit)",
		"policy\x00{r\x00sender=a@b}\x0010":                                     "rule r: sender=a@b (the rule's 11th limit)",
		"policy\x00{r\x00sender=a@b}\x0021":                                     "rule r: sender=a@b (the rule's 22nd limit)",
		"anvil\x00c\x00127.0.0.1:25:127.0.0.1":                                  "anvil connections of 127.0.0.1:25:127.0.0.1",
		"anvil\x00r\x00smtp:192.0.2.1":                                          "anvil rates of smtp:192.0.2.1",
		"class\x00local":                                                        "class local",
		"throttle\x00c\x00relay-a\x00relay.example":                             "throttle relay-a, bucket relay.example: sessions",
		"throttle\x00r\x00relay-a\x00relay.example":                             "throttle relay-a, bucket relay.example: bookings",
		"health\x00alive":                                                       "health, alive",
		"policy\x00broken":                                                      "policy, broken",
		"":                                                                      "",
	} {
		if got := StoreKeyText(key); got != want {
			t.Errorf("StoreKeyText(%q) = %q, want %q", key, got, want)
		}
	}
}

// The keys the governor makes render as StoreKeyText says.
func TestStoreKeyTextOfMadeKeys(t *testing.T) {
	if got := StoreKeyText(anvilCountKey("smtp:192.0.2.1")); got != "anvil connections of smtp:192.0.2.1" {
		t.Errorf("anvil count key: %q", got)
	}
	if got := StoreKeyText(anvilRateKey("smtp:192.0.2.1")); got != "anvil rates of smtp:192.0.2.1" {
		t.Errorf("anvil rate key: %q", got)
	}
}

// TestCanonicalKey: a key as typed is checked against the rule's key
// parts and normalised as the rule's decisions build it; one that does
// not fit the rule is refused naming the rule's parts.
func TestCanonicalKey(t *testing.T) {
	sender := &PolicyRule{Name: "out", Key: []KeyPart{{Attr: "sender"}}}
	nets := &PolicyRule{Name: "nets", Key: []KeyPart{{Attr: "sasl_username"}, {Attr: "client_address", V4Prefix: 24, V6Prefix: 64}}}
	dom := &PolicyRule{Name: "dom", Key: []KeyPart{{Attr: "sender_domain"}, {Attr: "client_address"}}}
	for _, c := range []struct {
		r          *PolicyRule
		text, want string
	}{
		{sender, "sender=Alice@Example.com", "sender=alice@example.com"},
		{sender, "  sender=a@b  ", "sender=a@b"},
		{sender, "sender=", "sender="},
		{nets, "sasl_username=U, client_address=192.0.2.77", "sasl_username=U\x00client_address=192.0.2.0/24"},
		{nets, "client_address=192.0.2.0/24,sasl_username=u", "sasl_username=u\x00client_address=192.0.2.0/24"},
		{nets, "sasl_username=u, client_address=::ffff:192.0.2.9", "sasl_username=u\x00client_address=192.0.2.0/24"},
		{nets, "sasl_username=u, client_address=2001:DB8::1", "sasl_username=u\x00client_address=2001:db8::/64"},
		{nets, "sasl_username=u, client_address=2001:db8:0:0:1::/64", "sasl_username=u\x00client_address=2001:db8::/64"},
		{dom, "sender_domain=Example.COM, client_address=192.0.2.1", "sender_domain=example.com\x00client_address=192.0.2.1"},
	} {
		got, err := CanonicalKey(c.r, c.text)
		if err != nil || got != c.want {
			t.Errorf("CanonicalKey(%s, %q) = %q, %v; want %q", c.r.Name, c.text, got, err, c.want)
		}
	}
	for _, c := range []struct {
		r          *PolicyRule
		text, want string
	}{
		{sender, "alice@example.com", `"alice@example.com" is not attribute=value (the rule counts by sender)`},
		{sender, "recipient=a@b", `no key part "recipient" (the rule counts by sender)`},
		{sender, "sender=a@b, sender=c@d", "2 part(s), not 1"},
		{sender, "sender=a\x00b", "a NUL in it"},
		{nets, "sasl_username=u", "1 part(s), not 2 (the rule counts by sasl_username, client_address/24/64)"},
		{nets, "sasl_username=u, sasl_username=v", "sasl_username given twice"},
		{nets, "sasl_username=u, client_address=192.0.2.0/16", "not a /24 network"},
		{nets, "sasl_username=u, client_address=host.example", "not an address"},
		{nets, "sasl_username=u, client_address=1.2.3/24", "not an address or network"},
		{dom, "", "1 part(s), not 2"},
	} {
		got, err := CanonicalKey(c.r, c.text)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CanonicalKey(%s, %q) = %q, %v; want an error with %q", c.r.Name, c.text, got, err, c.want)
		}
	}
}

// FuzzCanonicalKey: no key text panics, and what is accepted is its own
// canonical form (the text form of an accepted key is accepted as the
// same key).
func FuzzCanonicalKey(f *testing.F) {
	for _, s := range []string{"sender=Alice@Example.com", "sasl_username=u, client_address=192.0.2.7", "client_address=2001:db8::/64,sasl_username=x", "x", "=,="} {
		f.Add(s)
	}
	rules := []*PolicyRule{
		{Name: "out", Key: []KeyPart{{Attr: "sender"}}},
		{Name: "nets", Key: []KeyPart{{Attr: "sasl_username"}, {Attr: "client_address", V4Prefix: 24, V6Prefix: 64}}},
	}
	f.Fuzz(func(t *testing.T, text string) {
		for _, r := range rules {
			k, err := CanonicalKey(r, text)
			if err != nil {
				continue
			}
			again, err := CanonicalKey(r, keyText(k))
			if err != nil || again != k {
				t.Fatalf("CanonicalKey(%q) = %q, but its text form gives %q, %v", text, k, again, err)
			}
		}
	})
}
