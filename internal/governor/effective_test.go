package governor

import (
	"fmt"
	"strings"
	"testing"

	"sluice/internal/limiter"
	"sluice/internal/limittable"

	vocab "sluice/internal/rules"
)

func table(t *testing.T, text string) *limittable.Table {
	t.Helper()
	tab, errs := limittable.Parse(strings.NewReader(text), "senders.limits", nil)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return tab
}

// eom sends n messages from sender and returns the verbs of the
// END-OF-MESSAGE answers.
func (f *fixture) eom(t *testing.T, n int, sender string) string {
	t.Helper()
	var ps PolicySession
	var v []string
	for i := range n {
		acts := f.send(t, &ps, msg{sender: sender, rcpts: []string{"a@x"}, instance: fmt.Sprint(sender, i)})
		v = append(v, acts[len(acts)-1])
	}
	return verbs(v)
}

// TestPolicyTableRaisesAfterReload: a sender at 10 of 10 is refused; a
// table entry raising it to 20 (a new Governor over the same limiter, as
// a reload builds) lets 10 more through and refuses the 21st, because the
// entry's limit is counted under the rule's store key. Other senders keep
// the rule's 10; an exempt sender is never counted.
func TestPolicyTableRaisesAfterReload(t *testing.T) {
	rule := PolicyRule{Name: "sender-rate", Count: vocab.CountMessages, Key: []KeyPart{{Attr: "sender"}}, Limits: []limiter.Limit{lim("10/60s exact")}}
	f := policyFixture(t, rule)
	if got := f.eom(t, 11, "Big@Example.com"); got != strings.Repeat("DUNNO,", 10)+"DEFER_IF_PERMIT" {
		t.Fatalf("before the table: %s", got)
	}
	rules := f.g.policy
	rules.Rules = []PolicyRule{f.g.policy.Rules[0]}
	rules.Rules[0].Table = table(t, "# sender  limits\nbig@example.com 20/60s\nfriend@example.org exempt\n")
	f.g = New(Options{Limiter: f.g.lim, Classes: f.g.classes, Policy: rules, Logger: f.g.log})

	if got := f.eom(t, 11, "big@example.com"); got != strings.Repeat("DUNNO,", 10)+"DEFER_IF_PERMIT" {
		t.Errorf("raised to 20 after 10: %s, want 10 more accepted and the 21st refused", got)
	}
	if got := f.eom(t, 11, "other@example.com"); got != strings.Repeat("DUNNO,", 10)+"DEFER_IF_PERMIT" {
		t.Errorf("a sender without an entry: %s, want the rule's 10", got)
	}
	if got := f.eom(t, 50, "friend@example.org"); strings.Contains(got, "DEFER") {
		t.Errorf("an exempt sender was refused: %s", got)
	}
	// The refusal names the entry's limit; the exemption counted nothing.
	var ps PolicySession
	acts := f.send(t, &ps, msg{sender: "big@example.com", rcpts: []string{"a@x"}, instance: "last"})
	if want := "DEFER_IF_PERMIT over sender-rate sender=big@example.com 20/20 per 60s"; !strings.HasPrefix(acts[1], want) {
		t.Errorf("reply %q, want %q...", acts[1], want)
	}
	out := make([]limiter.Decision, 1)
	checks := []limiter.Check{{Key: "policy\x00{sender-rate\x00sender=friend@example.org}\x000", Limit: lim("10/60s exact")}}
	if err := f.store.Peek(f.ctx, f.clk.Now(), 1, checks, out); err != nil || out[0].Count != 0 {
		t.Errorf("the exempt sender's key: %+v %v, want nothing counted", out[0], err)
	}
}

func TestEffectiveLimits(t *testing.T) {
	r := &PolicyRule{Name: "r", Limits: []limiter.Limit{lim("10/60s")},
		Table: table(t, "u,192.0.2.1 5/1m, 100/1d smooth\nv,192.0.2.1 exempt\n")}
	g := &Governor{}
	for _, c := range []struct{ key, want string }{
		{"sasl_username=u\x00client_address=192.0.2.1", "[5/60s exact 100/1d smooth] false senders.limits:1"},
		{"sasl_username=V\x00client_address=192.0.2.1", "[] true senders.limits:2"},
		{"sasl_username=w\x00client_address=192.0.2.1", "[10/60s exact] false rule"},
	} {
		e := g.EffectiveLimits(r, c.key)
		if got := fmt.Sprint(e.Limits, " ", e.Exempt, " ", e.Source); got != c.want {
			t.Errorf("%q: %s, want %s", c.key, got, c.want)
		}
	}
	if got := TableKey("sender=a=b@x"); got != "a=b@x" {
		t.Errorf("TableKey: %q", got)
	}
}

// TestPolicyTableNetworkKey: a rule keyed on client networks looks its
// table up by the network, as docs/policy.md says.
func TestPolicyTableNetworkKey(t *testing.T) {
	f := policyFixture(t, PolicyRule{Name: "per-net", Count: vocab.CountMessages, Key: []KeyPart{{Attr: "client_address", V4Prefix: 24, V6Prefix: 64}},
		Limits: []limiter.Limit{lim("1/60s")}, Table: table(t, "192.0.2.0/24 exempt\n2001:db8:1::/64 3/60s\n")})
	var ps PolicySession
	var got []string
	for i, client := range []string{"192.0.2.7", "192.0.2.8", "198.51.100.1", "198.51.100.2", "2001:db8:1::1", "2001:db8:1::2", "2001:db8:1::3", "2001:db8:1::4"} {
		acts := f.send(t, &ps, msg{client: client, port: fmt.Sprint(i), sender: "a@b", rcpts: []string{"r@x"}, instance: fmt.Sprint(i)})
		got = append(got, acts[1])
	}
	if want := "DUNNO,DUNNO,DUNNO,DEFER_IF_PERMIT,DUNNO,DUNNO,DUNNO,DEFER_IF_PERMIT"; verbs(got) != want {
		t.Errorf("got %s, want %s", verbs(got), want)
	}
}

// TestPolicyResetTableLimits: a reset forgets every limit of a table
// entry, up to limittable.MaxLimits, not only the rule's.
func TestPolicyResetTableLimits(t *testing.T) {
	rule := PolicyRule{Name: "out", Count: vocab.CountMessages, Key: []KeyPart{{Attr: "sender"}}, Limits: []limiter.Limit{lim("10/60s exact")},
		Table: table(t, "big@example.com 9/1m, 9/2m, 9/3m, 9/4m, 9/5m, 9/6m, 9/7m, 1/8m\n")}
	f := policyFixture(t, rule)
	if got := f.eom(t, 2, "big@example.com"); got != "DUNNO,DEFER_IF_PERMIT" {
		t.Fatalf("before the reset: %s", got)
	}
	if reset, err := f.g.PolicyReset(f.ctx, "out", "sender=Big@example.com"); err != nil || len(reset) != 1 {
		t.Fatalf("PolicyReset = %q, %v", reset, err)
	}
	if got := f.eom(t, 1, "big@example.com"); got != "DUNNO" {
		t.Fatalf("after the reset the entry's 8th limit still counts: %s", got)
	}
}
