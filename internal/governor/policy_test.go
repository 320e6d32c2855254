package governor

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/internal/hostmask"
	"sluice/internal/limiter"

	vocab "sluice/internal/rules"
)

func lim(s string) limiter.Limit {
	l, err := vocab.ParseLimit(s)
	if err != nil {
		panic(err)
	}
	return l
}

func policyFixture(t testing.TB, rules ...PolicyRule) *fixture {
	t.Helper()
	f := newFixture(t, []limiter.Class{
		{Name: "partners", Masks: []hostmask.Mask{hostmask.MustParse("198.51.100.0/24")}},
		{Name: "rest", Masks: []hostmask.Mask{hostmask.MustParse("*")}},
	}, AnvilRules{})
	for i := range rules {
		if rules[i].Action == "" {
			rules[i].Action = "DEFER_IF_PERMIT over {rule} {key} {count}/{limit} per {period} retry {retry}"
		}
		if rules[i].Stage == "" && rules[i].Count != vocab.CountConnections {
			rules[i].Stage = vocab.StateEOM
		}
	}
	f.g.policy = PolicyRules{Rules: rules, Default: "DUNNO"}
	return f
}

type msg struct {
	client, port, sender string
	rcpts                []string
	size                 int64
	instance             string
}

// send plays one message as smtpd asks about it: one RCPT query per
// recipient, then END-OF-MESSAGE. It returns the actions.
func (f *fixture) send(t *testing.T, ps *PolicySession, m msg) []string {
	t.Helper()
	var out []string
	base := PolicyRequest{ClientAddress: m.client, ClientPort: m.port, Sender: m.sender, Instance: m.instance, Size: m.size}
	if base.ClientAddress == "" {
		base.ClientAddress = "192.0.2.10"
	}
	for _, r := range m.rcpts {
		q := base
		q.ProtocolState, q.Recipient = vocab.StateRcpt, r
		out = append(out, f.check(t, ps, &q))
	}
	q := base
	q.ProtocolState, q.RecipientCount = vocab.StateEOM, int64(len(m.rcpts))
	out = append(out, f.check(t, ps, &q))
	return out
}

func (f *fixture) check(t *testing.T, ps *PolicySession, q *PolicyRequest) string {
	t.Helper()
	q.Attr = func(name string) (string, bool) {
		switch name {
		case "sender":
			return q.Sender, true
		case "recipient":
			return q.Recipient, true
		case "client_address":
			return q.ClientAddress, true
		case "sasl_username":
			return q.SASLUsername, true
		}
		return "", false
	}
	a, err := f.g.PolicyCheck(f.ctx, ps, q)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func verbs(actions []string) string {
	var v []string
	for _, a := range actions {
		w, _, _ := strings.Cut(a, " ")
		v = append(v, w)
	}
	return strings.Join(v, ",")
}

func TestPolicyMessagesAtEOM(t *testing.T) {
	f := policyFixture(t, PolicyRule{Name: "sender-rate", Count: vocab.CountMessages, Key: []KeyPart{{Attr: "sender"}}, Limits: []limiter.Limit{lim("10/60s exact")}})
	var ps PolicySession
	accepted, deferred := 0, 0
	var last string
	for i := range 15 {
		acts := f.send(t, &ps, msg{sender: "Alice@Example.net", rcpts: []string{"a@x", "b@x"}, instance: fmt.Sprint(i)})
		// RCPT queries are never refused by a message rule.
		if acts[0] != "DUNNO" || acts[1] != "DUNNO" {
			t.Fatalf("RCPT answered %v", acts)
		}
		switch eom := acts[2]; {
		case eom == "DUNNO":
			accepted++
		case strings.HasPrefix(eom, "DEFER_IF_PERMIT"):
			deferred++
			last = eom
		default:
			t.Fatalf("action %q", eom)
		}
	}
	if accepted != 10 || deferred != 5 {
		t.Fatalf("accepted %d deferred %d, want 10 and 5", accepted, deferred)
	}
	if want := "DEFER_IF_PERMIT over sender-rate sender=alice@example.net 10/10 per 60s retry 60"; last != want {
		t.Fatalf("reply %q, want %q", last, want)
	}
	// Another sender is not affected.
	if a := f.send(t, &ps, msg{sender: "carol@example.net", rcpts: []string{"a@x"}, instance: "c"}); a[1] != "DUNNO" {
		t.Fatalf("other sender: %v", a)
	}
}

func TestPolicyLeakyUndoesEarlierRules(t *testing.T) {
	f := policyFixture(t,
		PolicyRule{Name: "per-client", Count: vocab.CountMessages, Key: []KeyPart{{Attr: "client_address"}}, Limits: []limiter.Limit{lim("100/60s exact")}},
		PolicyRule{Name: "per-sender", Count: vocab.CountMessages, Key: []KeyPart{{Attr: "sender"}}, Limits: []limiter.Limit{lim("2/60s exact")}},
	)
	var ps PolicySession
	var got []string
	for i := range 4 {
		got = append(got, verbs(f.send(t, &ps, msg{sender: "s@x", instance: fmt.Sprint(i)})))
	}
	if strings.Join(got, " ") != "DUNNO DUNNO DEFER_IF_PERMIT DEFER_IF_PERMIT" {
		t.Fatalf("actions %v", got)
	}
	// per-client counted only the two messages that went through.
	out := make([]limiter.Decision, 1)
	c := limiter.Check{Key: "policy\x00{per-client\x00client_address=192.0.2.10}\x000", Limit: lim("100/60s exact")}
	if err := f.g.lim.Peek(f.ctx, 0, []limiter.Check{c}, out); err != nil || out[0].Count != 2 {
		t.Fatalf("per-client count %d (%v), want 2", out[0].Count, err)
	}
}

func TestPolicyStrictAndDryRun(t *testing.T) {
	f := policyFixture(t,
		PolicyRule{Name: "strict", Count: vocab.CountMessages, Key: []KeyPart{{Attr: "sender"}}, Limits: []limiter.Limit{lim("2/60s anvil")}, Mode: limiter.Strict, Match: PolicyMatch{Sender: []string{"s@x"}}},
		PolicyRule{Name: "dry", Count: vocab.CountMessages, Key: []KeyPart{{Attr: "sender"}}, Limits: []limiter.Limit{lim("1/60s exact")}, DryRun: true, Match: PolicyMatch{Sender: []string{"d@x"}}},
	)
	var ps PolicySession
	for i := range 4 {
		f.send(t, &ps, msg{sender: "s@x", instance: fmt.Sprint(i)})
	}
	// Strict: refused attempts count; with this one the window holds 5.
	if a := f.send(t, &ps, msg{sender: "s@x", instance: "x"})[0]; !strings.Contains(a, " 5/2 ") {
		t.Fatalf("strict reply %q, want count 5", a)
	}
	var acts []string
	for i := range 3 {
		acts = append(acts, f.send(t, &ps, msg{sender: "d@x", instance: fmt.Sprint("d", i)})[0])
	}
	if acts[0] != "DUNNO" || !strings.HasPrefix(acts[1], "WARN over dry sender=d@x 2/1") || !strings.HasPrefix(acts[2], "WARN over dry sender=d@x 3/1") {
		t.Fatalf("dry run actions %q", acts)
	}
}

func TestPolicyRecipients(t *testing.T) {
	f := policyFixture(t, PolicyRule{Name: "rcpts", Count: vocab.CountRecipients, Key: []KeyPart{{Attr: "sender"}}, Limits: []limiter.Limit{lim("5/60s exact")}})
	var ps PolicySession
	r3 := []string{"a@x", "b@x", "c@x"}
	got := []string{
		f.send(t, &ps, msg{sender: "s@x", rcpts: r3, instance: "1"})[3],
		f.send(t, &ps, msg{sender: "s@x", rcpts: r3, instance: "2"})[3],
		f.send(t, &ps, msg{sender: "s@x", rcpts: r3[:2], instance: "3"})[2],
	}
	if verbs(got) != "DUNNO,DEFER_IF_PERMIT,DUNNO" {
		t.Fatalf("actions %v", got)
	}
}

func TestPolicyRcptStageRollback(t *testing.T) {
	f := policyFixture(t,
		PolicyRule{Name: "rcpts", Count: vocab.CountRecipients, Stage: vocab.StateRcpt, Rollback: true, Key: []KeyPart{{Attr: "sender"}}, Limits: []limiter.Limit{lim("4/60s exact")}},
		PolicyRule{Name: "msgs", Count: vocab.CountMessages, Stage: vocab.StateRcpt, Key: []KeyPart{{Attr: "sender"}}, Limits: []limiter.Limit{lim("1/60s exact")}},
	)
	var ps PolicySession
	q := func(state, rcpt, inst string) string {
		return f.check(t, &ps, &PolicyRequest{ProtocolState: state, ClientAddress: "192.0.2.1", Sender: "s@x", Recipient: rcpt, Instance: inst})
	}
	// Transaction A: three recipients, then abandoned (new instance, no EOM).
	for _, r := range []string{"a", "b", "c"} {
		if a := q(vocab.StateRcpt, r, "A"); a != "DUNNO" {
			t.Fatalf("A %s: %q", r, a)
		}
	}
	// The message rule counted A once (limit 1), so B's first RCPT is over
	// it; but the recipients of A were taken back: B can add four.
	if a := q(vocab.StateRcpt, "d", "B"); !strings.HasPrefix(a, "DEFER_IF_PERMIT over msgs") {
		t.Fatalf("B: %q", a)
	}
	f.clk.Advance(61 * time.Second)
	for i, r := range []string{"e", "f", "g", "h"} {
		if a := q(vocab.StateRcpt, r, "C"); a != "DUNNO" {
			t.Fatalf("C rcpt %d: %q (rollback did not free A's recipients?)", i, a)
		}
	}
	if a := q(vocab.StateRcpt, "i", "C"); !strings.HasPrefix(a, "DEFER_IF_PERMIT over rcpts") {
		t.Fatalf("fifth recipient: %q", a)
	}
	q(vocab.StateEOM, "", "C") // finished: C's counts stay
	if a := q(vocab.StateRcpt, "j", "D"); !strings.HasPrefix(a, "DEFER_IF_PERMIT") {
		t.Fatalf("after a finished transaction the counts must stay: %q", a)
	}
}

func TestPolicyConnections(t *testing.T) {
	f := policyFixture(t, PolicyRule{Name: "conns", Count: vocab.CountConnections, Key: []KeyPart{{Attr: "client_address", V4Prefix: 24, V6Prefix: 64}}, Limits: []limiter.Limit{lim("2/60s exact")},
		Action: "421 4.7.0 too many connections from {key}"})
	var ps PolicySession
	session := func(client, port string, queries int) string {
		var last string
		for range queries {
			last = f.check(t, &ps, &PolicyRequest{ProtocolState: vocab.StateRcpt, ClientAddress: client, ClientPort: port})
		}
		return last
	}
	if a := session("192.0.2.1", "1000", 3); a != "DUNNO" {
		t.Fatalf("first session: %q", a)
	}
	if a := session("192.0.2.200", "1001", 2); a != "DUNNO" {
		t.Fatalf("second session from the same /24: %q", a)
	}
	if a := session("192.0.2.77", "1002", 2); a != "421 4.7.0 too many connections from client_address=192.0.2.0/24" {
		t.Fatalf("third session: %q", a)
	}
	if a := session("2001:db8:1:2::5", "1003", 1); a != "DUNNO" {
		t.Fatalf("IPv6 session: %q", a)
	}
}

func TestPolicyMatching(t *testing.T) {
	f := policyFixture(t, PolicyRule{Name: "m", Count: vocab.CountMessages, Key: []KeyPart{{Attr: "sasl_username"}}, Limits: []limiter.Limit{lim("1/60s exact")},
		Match: PolicyMatch{SenderDomain: []hostmask.Mask{hostmask.MustParse("*.example.org")}, SASLUsername: []string{"*"}, Class: []string{"partners"}}})
	cases := []struct {
		client, sender, user string
		counted              bool
	}{
		{"198.51.100.5", "a@mail.example.org", "u1", true},
		{"198.51.100.5", "a@example.org", "", false},   // not authenticated
		{"198.51.100.5", "a@example.com", "u2", false}, // other domain
		{"192.0.2.5", "a@example.org", "u3", false},    // other class
		{"198.51.100.9", "b@example.org", "u4", true},
	}
	for i, c := range cases {
		var ps PolicySession
		req := func() string {
			return f.check(t, &ps, &PolicyRequest{ProtocolState: vocab.StateEOM, ClientAddress: c.client, Sender: c.sender, SASLUsername: c.user, Instance: fmt.Sprint(i)})
		}
		req()
		second := req()
		if (second != "DUNNO") != c.counted {
			t.Errorf("case %d %+v: second message %q", i, c, second)
		}
	}
}

func TestPolicyBytes(t *testing.T) {
	f := policyFixture(t, PolicyRule{Name: "bytes", Count: vocab.CountBytes, Key: []KeyPart{{Attr: "sender"}}, Limits: []limiter.Limit{lim("1000000/60s smooth")}})
	var ps PolicySession
	var got []string
	for _, size := range []int64{600000, 300000, 200000, 50000} {
		got = append(got, f.send(t, &ps, msg{sender: "s@x", size: size, instance: fmt.Sprint(size)})[0])
	}
	if verbs(got) != "DUNNO,DUNNO,DEFER_IF_PERMIT,DUNNO" {
		t.Fatalf("actions %v", got)
	}
}

// TestPolicyWindowEdge: 10 per 6 s; 1 at 0 s, 9 at 5.3 s, 10 at 6.3 s.
func TestPolicyWindowEdge(t *testing.T) {
	f := policyFixture(t, PolicyRule{Name: "edge", Count: vocab.CountMessages, Key: []KeyPart{{Attr: "sender"}}, Limits: []limiter.Limit{lim("10/6s exact")}})
	var ps PolicySession
	n := 0
	admitted := func(k int) int {
		got := 0
		for range k {
			n++
			if f.send(t, &ps, msg{sender: "s@x", instance: fmt.Sprint(n)})[0] == "DUNNO" {
				got++
			}
		}
		return got
	}
	a := admitted(1)
	f.clk.Advance(5300 * time.Millisecond)
	b := admitted(9)
	f.clk.Advance(time.Second)
	c := admitted(10)
	// The window (0.3 s, 6.3 s] already holds 9: one more fits, never 10.
	if a != 1 || b != 9 || c != 1 {
		t.Fatalf("admitted %d %d %d, want 1 9 1", a, b, c)
	}
}

// TestPolicyExactConcurrent: 64 sessions at once, one limit: exactly N.
func TestPolicyExactConcurrent(t *testing.T) {
	for _, conc := range []int{1, 8, 64} {
		f := policyFixture(t, PolicyRule{Name: "x", Count: vocab.CountMessages, Key: []KeyPart{{Attr: "sender"}}, Limits: []limiter.Limit{lim("10/60s exact")}})
		var mu sync.Mutex
		admitted := 0
		var wg sync.WaitGroup
		for w := range conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var ps PolicySession
				for i := range 128 / conc {
					q := &PolicyRequest{ProtocolState: vocab.StateEOM, ClientAddress: "192.0.2.1", Sender: "s@x", Instance: fmt.Sprint(w, ".", i)}
					a, err := f.g.PolicyCheck(f.ctx, &ps, q)
					if err != nil {
						t.Error(err)
						return
					}
					if a == "DUNNO" {
						mu.Lock()
						admitted++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		if admitted != 10 {
			t.Errorf("c=%d: admitted %d, want 10", conc, admitted)
		}
	}
}
