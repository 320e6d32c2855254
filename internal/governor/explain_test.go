package governor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"

	"sluice/internal/hostmask"
	"sluice/internal/limiter"
	"sluice/internal/limittable"

	vocab "sluice/internal/rules"
)

func withExemptions(t *testing.T, f *fixture) *Exemptions {
	t.Helper()
	m, err := limiter.NewMemoryMarks("", f.clk)
	if err != nil {
		t.Fatal(err)
	}
	f.g.exempt = NewExemptions(m)
	return f.g.exempt
}

// randomRules makes 1 to 4 rules of random keys, limits, modes and
// matches.
func randomRules(rng *rand.Rand) []PolicyRule {
	keys := [][]KeyPart{{{Attr: "sender"}}, {{Attr: "client_address", V4Prefix: 24, V6Prefix: 64}}, {{Attr: "sender_domain"}}, {{Attr: "sender"}, {Attr: "client_address"}}}
	algos := []string{"exact", "anvil", "smooth"}
	var rs []PolicyRule
	for i := range 1 + rng.IntN(4) {
		r := PolicyRule{
			Name:  string(rune('a' + i)),
			Key:   keys[rng.IntN(len(keys))],
			Count: vocab.CountMessages,
			Stage: []string{vocab.StateRcpt, vocab.StateEOM}[rng.IntN(2)],
			Mode:  []limiter.Mode{limiter.Leaky, limiter.Strict}[rng.IntN(2)],
		}
		for range 1 + rng.IntN(2) {
			r.Limits = append(r.Limits, lim(string(rune('1'+rng.IntN(4)))+"/1m "+algos[rng.IntN(3)]))
		}
		r.DryRun = rng.IntN(5) == 0
		if rng.IntN(3) == 0 {
			r.Match.SenderDomain = []hostmask.Mask{hostmask.MustParse("b.example")}
		}
		if rng.IntN(3) == 0 {
			r.Table = randomTable(rng, r.Key)
		}
		rs = append(rs, r)
	}
	return rs
}

// randomTable makes a per-key table for a rule keyed by key: entries of
// 1 to limittable.MaxLimits limits, or exempt, for some of the keys the
// requests of TestExplainMatchesCheck make.
func randomTable(rng *rand.Rand, key []KeyPart) *limittable.Table {
	var keys []string
	switch {
	case len(key) == 2:
		keys = []string{"a@a.example,192.0.2.1", "c@b.example,198.51.100.9"}
	case key[0].Attr == "sender":
		keys = []string{"a@a.example", "b@b.example", "C@B.example"}
	case key[0].Attr == "sender_domain":
		keys = []string{"b.example"}
	default:
		keys = []string{"192.0.2.0/24", "2001:db8::/64"}
	}
	algos := []string{"exact", "anvil", "smooth"}
	var b strings.Builder
	for _, k := range keys {
		if rng.IntN(3) == 0 {
			continue
		}
		b.WriteString(k + " ")
		if rng.IntN(5) == 0 {
			b.WriteString("exempt\n")
			continue
		}
		for j := range 1 + rng.IntN(limittable.MaxLimits) {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%d/%dm %s", 1+rng.IntN(5), 1+rng.IntN(2), algos[rng.IntN(3)])
		}
		b.WriteString("\n")
	}
	t, errs := limittable.Parse(strings.NewReader(b.String()), "random.limits", nil)
	if len(errs) > 0 {
		panic(fmt.Sprint(errs))
	}
	return t
}

// typedKey is the key r counts req under, as a person might type it:
// attribute names in any order, addresses in any case.
func typedKey(rng *rand.Rand, r *PolicyRule, req *PolicyRequest) string {
	mixed := func(s string) string {
		b := []byte(s)
		for i := range b {
			if rng.IntN(2) == 0 {
				b[i] = byte(unicode.ToUpper(rune(b[i])))
			}
		}
		return string(b)
	}
	var parts []string
	for _, k := range r.Key {
		v := req.attr(k.Attr)
		switch k.Attr {
		case "sender":
			v = mixed(v)
		case "sender_domain":
			v = mixed(domainOf(req.Sender))
		}
		parts = append(parts, k.Attr+"="+v)
	}
	rng.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	return strings.Join(parts, ", ")
}

// TestExplainMatchesCheck: over random rules, exemptions and requests,
// PolicyExplain's answer is the answer PolicyCheck then gives the same
// request, and explaining counts nothing (explaining twice gives the same
// steps).
func TestExplainMatchesCheck(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 28))
	senders := []string{"a@a.example", "b@b.example", "c@b.example", "", "A@a.Example", "C@B.EXAMPLE"}
	clients := []string{"192.0.2.1", "192.0.2.7", "198.51.100.9", "2001:db8::1"}
	compared, refused := 0, 0
	for round := range 40 {
		f := policyFixture(t, randomRules(rng)...)
		ex := withExemptions(t, f)
		for i := range 60 {
			req := &PolicyRequest{Sender: senders[rng.IntN(len(senders))], ClientAddress: clients[rng.IntN(len(clients))],
				ProtocolState: []string{vocab.StateRcpt, vocab.StateEOM}[rng.IntN(2)], Recipient: "r@c.example",
				Instance: string(rune(round)) + string(rune(i)), ClientPort: "25", RecipientCount: 1}
			if rng.IntN(20) == 0 {
				r := &f.g.policy.Rules[rng.IntN(len(f.g.policy.Rules))]
				x := Exemption{Rule: r.Name, Key: typedKey(rng, r, req), Since: f.clk.Now(), Until: f.clk.Now().Add(time.Minute)}
				if x.Through = rng.IntN(2) == 0; !x.Through {
					x.Raise = 1 + rng.Int64N(3)
				}
				if _, err := ex.Set(context.Background(), r, x); err != nil {
					t.Fatal(err)
				}
				// The exemption is found under the key the rule counts.
				var class string
				if eff := f.g.EffectiveLimits(r, policyKey(r, req, f.g, peerOf(req), &class)); eff.Exemption.Rule != r.Name {
					t.Fatalf("exemption of %s key %q set but not found for %+v", r.Name, x.Key, *req)
				}
			}
			e1, err := f.g.PolicyExplain(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			e2, _ := f.g.PolicyExplain(context.Background(), req)
			if e1.Answer != e2.Answer || len(e1.Rules) != len(e2.Rules) {
				t.Fatalf("explaining twice differs: %+v then %+v", e1, e2)
			}
			got := f.check(t, &PolicySession{}, req)
			if strictRefusal(f.g, e1) {
				// A strict rule counts the refused attempt: the reply's
				// {count} includes it, the explanation's does not.
				got, e1.Answer = countRe.ReplaceAllString(got, " _/"), countRe.ReplaceAllString(e1.Answer, " _/")
			}
			if got != e1.Answer {
				t.Fatalf("round %d request %d %+v: explain said %q (%+v), the check answered %q", round, i, *req, e1.Answer, e1.Rules, got)
			}
			compared++
			if got != "DUNNO" {
				refused++
			}
			if rng.IntN(10) == 0 {
				f.clk.Advance(time.Duration(rng.IntN(30)) * time.Second)
			}
		}
	}
	if refused < compared/10 {
		t.Fatalf("only %d of %d requests refused or warned: the comparison hardly covers refusals", refused, compared)
	}
}

var countRe = regexp.MustCompile(` \d+/`)

// strictRefusal says whether the explanation's answer is a strict rule's
// refusal (or dry-run warning).
func strictRefusal(g *Governor, e Explanation) bool {
	for _, s := range e.Rules {
		if strings.HasPrefix(s.Outcome, "over") {
			r, _ := g.policyRule(s.Rule)
			if r.Mode == limiter.Strict || r.DryRun {
				return true
			}
		}
	}
	return false
}

// TestExemptions: a raise lets a key at its limit through that many more
// times, and ends on time; a "through" exemption skips the rule and
// counts nothing; deleting it restores the limit.
func TestExemptions(t *testing.T) {
	f := policyFixture(t, PolicyRule{Name: "out", Key: []KeyPart{{Attr: "sender"}}, Count: vocab.CountMessages, Limits: []limiter.Limit{lim("2/1h exact")}})
	ex := withExemptions(t, f)
	ctx := context.Background()
	req := &PolicyRequest{Sender: "a@a.example", ClientAddress: "192.0.2.1", ProtocolState: vocab.StateEOM}
	sendN := func(n int) (ok int) {
		for range n {
			if f.check(t, &PolicySession{}, req) == "DUNNO" {
				ok++
			}
		}
		return ok
	}
	if ok := sendN(3); ok != 2 {
		t.Fatalf("before any exemption %d of 3 accepted; want 2", ok)
	}
	out := &f.g.policy.Rules[0]
	if _, err := ex.Set(ctx, out, Exemption{Rule: "out", Key: "sender=A@a.example", Raise: 5, Since: f.clk.Now(), Until: f.clk.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if ok := sendN(7); ok != 5 {
		t.Fatalf("with a raise of 5, %d of 7 accepted; want 5", ok)
	}
	f.clk.Advance(time.Minute)
	if l, _ := ex.List(f.clk.Now()); len(l) != 0 {
		t.Fatalf("expired exemption still listed: %+v", l)
	}
	if ok := sendN(1); ok != 0 {
		t.Fatal("accepted after the exemption expired")
	}
	if _, err := ex.Set(ctx, out, Exemption{Rule: "out", Key: "sender=a@A.example", Through: true, Since: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if ok := sendN(4); ok != 4 {
		t.Fatalf("through the rule, %d of 4 accepted", ok)
	}
	if had, err := ex.Delete(ctx, "out", "sender=a@a.example", f.clk.Now()); !had || err != nil {
		t.Fatalf("Delete = %v, %v", had, err)
	}
	if ok := sendN(1); ok != 0 {
		t.Fatal("accepted after the exemption was deleted")
	}
}

// TestPolicyKeysAndReset: the listing shows a key at its limit (and not
// a key below near), the look-up its count, and a reset of it (or of a
// pattern) lets the next message through.
func TestPolicyKeysAndReset(t *testing.T) {
	f := policyFixture(t, PolicyRule{Name: "out", Key: []KeyPart{{Attr: "sender"}}, Count: vocab.CountMessages, Limits: []limiter.Limit{lim("2/1h exact")}})
	ctx := context.Background()
	for _, s := range []string{"a@a.example", "a@a.example", "b@a.example"} {
		f.check(t, &PolicySession{}, &PolicyRequest{Sender: s, ClientAddress: "192.0.2.1", ProtocolState: vocab.StateEOM})
	}
	all, err := f.g.PolicyKeys(ctx, "out", "", 0)
	if err != nil || len(all) != 2 || all[0].Key != "sender=a@a.example" {
		t.Fatalf("PolicyKeys = %+v, %v", all, err)
	}
	near, _ := f.g.PolicyKeys(ctx, "", "", 90)
	if len(near) != 1 || near[0].Limits[0].Count != 2 || !near[0].Limits[0].Over {
		t.Fatalf("near 90%%: %+v", near)
	}
	if _, err := f.g.PolicyKeys(ctx, "nope", "", 0); err == nil {
		t.Fatal("no error for an unknown rule")
	}
	k, err := f.g.PolicyKey(ctx, "out", "sender=A@a.Example")
	if err != nil || k.Limits[0].Count != 2 || k.Limits[0].Remaining != 0 {
		t.Fatalf("PolicyKey as typed = %+v, %v", k, err)
	}
	for _, bad := range []string{"a@a.example", "recipient=a@a.example"} {
		if _, err := f.g.PolicyKey(ctx, "out", bad); err == nil || !strings.Contains(err.Error(), "counts by sender") {
			t.Errorf("PolicyKey(%q) = %v, want an error naming the rule's key", bad, err)
		}
		if _, err := f.g.PolicyReset(ctx, "out", bad); err == nil {
			t.Errorf("PolicyReset(%q) accepted", bad)
		}
	}
	reset, err := f.g.PolicyReset(ctx, "out", "sender=A@A.EXAMPLE")
	if err != nil || len(reset) != 1 {
		t.Fatalf("PolicyReset = %q, %v", reset, err)
	}
	if got := f.check(t, &PolicySession{}, &PolicyRequest{Sender: "a@a.example", ProtocolState: vocab.StateEOM}); got != "DUNNO" {
		t.Fatalf("after the reset: %q", got)
	}
	reset, _ = f.g.PolicyReset(ctx, "out", "sender=*@a.example")
	if len(reset) != 2 {
		t.Fatalf("pattern reset: %q", reset)
	}
	if all, _ := f.g.PolicyKeys(ctx, "out", "", 0); len(all) != 0 {
		t.Fatalf("keys left after the pattern reset: %+v", all)
	}
}

func TestGlob(t *testing.T) {
	for _, c := range []struct {
		p, s string
		want bool
	}{
		{"", "x", true}, {"*", "", true}, {"a", "a", true}, {"a", "ab", false},
		{"sender=*@b.example", "sender=x@b.example", true}, {"sender=*@b.example", "sender=x@c.example", false},
		{"*x*y", "axbxy", true}, {"a*a", "a", false}, {"**", "q", true},
	} {
		if got := Glob(c.p, c.s); got != c.want {
			t.Errorf("Glob(%q, %q) = %v", c.p, c.s, got)
		}
	}
}

// TestExplainNotesEachStep: a dry run notes each rule's step as it was
// taken (no match, not counted at this stage, exempt, within or over its
// limits, over a dry_run rule's) and answers as the check would, with
// nothing counted.
func TestExplainNotesEachStep(t *testing.T) {
	sender := []KeyPart{{Attr: "sender"}}
	f := policyFixture(t,
		PolicyRule{Name: "other", Key: sender, Count: vocab.CountMessages, Limits: []limiter.Limit{lim("1/1h exact")},
			Match: PolicyMatch{SenderDomain: []hostmask.Mask{hostmask.MustParse("b.example")}}},
		PolicyRule{Name: "rcpt", Key: sender, Count: vocab.CountMessages, Stage: vocab.StateRcpt, Limits: []limiter.Limit{lim("1/1h exact")}},
		PolicyRule{Name: "through", Key: sender, Count: vocab.CountMessages, Limits: []limiter.Limit{lim("1/1h exact")}},
		PolicyRule{Name: "watch", Key: sender, Count: vocab.CountMessages, DryRun: true, Limits: []limiter.Limit{lim("1/1h exact")}},
		PolicyRule{Name: "out", Key: sender, Count: vocab.CountMessages, Limits: []limiter.Limit{lim("2/1h exact")}},
	)
	ex := withExemptions(t, f)
	if _, err := ex.Set(context.Background(), &f.g.policy.Rules[2], Exemption{Rule: "through", Key: "sender=a@a.example", Through: true, Since: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	req := &PolicyRequest{Sender: "a@a.example", ClientAddress: "192.0.2.1", ProtocolState: vocab.StateEOM}
	outcomes := func(e Explanation) string {
		var s []string
		for _, r := range e.Rules {
			s = append(s, r.Rule+": "+r.Outcome)
		}
		return strings.Join(s, ", ")
	}
	for i, want := range []struct{ answer, steps string }{
		{"DUNNO", "other: no match, rcpt: not counted at END-OF-MESSAGE, through: exempt, watch: ok, out: ok"},
		{"WARN over watch", "other: no match, rcpt: not counted at END-OF-MESSAGE, through: exempt, watch: over (dry run), out: ok"},
		{"DEFER_IF_PERMIT over out", "other: no match, rcpt: not counted at END-OF-MESSAGE, through: exempt, watch: over (dry run), out: over"},
	} {
		e, err := f.g.PolicyExplain(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(e.Answer, want.answer) || outcomes(e) != want.steps {
			t.Fatalf("explain after %d messages: %q, %s; want %q..., %s", i, e.Answer, outcomes(e), want.answer, want.steps)
		}
		// A strict or dry_run rule counts the refused attempt: the reply's
		// {count} includes it, the explanation's does not.
		if got := f.check(t, &PolicySession{}, req); countRe.ReplaceAllString(got, " _/") != countRe.ReplaceAllString(e.Answer, " _/") {
			t.Fatalf("message %d: the check answered %q, explain %q", i+1, got, e.Answer)
		}
	}
}
