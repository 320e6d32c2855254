package governor

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"sluice/internal/limiter"
	"sluice/internal/store/redis"

	vocab "sluice/internal/rules"
)

// slotStore passes every call to a store and notes, for each Hit, Peek and
// Undo, whether its keys share a Redis Cluster slot as the Redis store
// lays them out: a call whose keys do not would fail with ErrCrossSlot on
// a Cluster.
type slotStore struct {
	limiter.Store
	mu     sync.Mutex
	calls  int // calls with more than one key
	spread []string
}

func (s *slotStore) note(op string, checks []limiter.Check) {
	if len(checks) < 2 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	first := redis.ClusterSlot(checks[0].Key)
	for _, c := range checks[1:] {
		if redis.ClusterSlot(c.Key) != first {
			s.spread = append(s.spread, fmt.Sprintf("%s: %q (slot %d) and %q (slot %d)", op, checks[0].Key, first, c.Key, redis.ClusterSlot(c.Key)))
		}
	}
}

func (s *slotStore) Hit(ctx context.Context, now time.Time, n int64, mode limiter.Mode, checks []limiter.Check, out []limiter.Decision) error {
	s.note("hit", checks)
	return s.Store.Hit(ctx, now, n, mode, checks, out)
}

func (s *slotStore) Peek(ctx context.Context, now time.Time, n int64, checks []limiter.Check, out []limiter.Decision) error {
	s.note("peek", checks)
	return s.Store.Peek(ctx, now, n, checks, out)
}

func (s *slotStore) Undo(ctx context.Context, now, at time.Time, n int64, checks []limiter.Check) error {
	s.note("undo", checks)
	return s.Store.Undo(ctx, now, at, n, checks)
}

// TestPolicyKeysShareASlot: for every key kind a policy rule can use, alone
// and combined, every count kind, and values holding braces (which Redis
// reads as hash tags), the keys of one decision land in one Redis Cluster
// slot, so the Redis store in Cluster mode decides them in one script.
func TestPolicyKeysShareASlot(t *testing.T) {
	limits := []limiter.Limit{lim("10/60s exact"), lim("100/1h smooth"), lim("20/60s")}
	var rules []PolicyRule
	kinds := [][]KeyPart{
		{{Attr: "sender"}}, {{Attr: "recipient"}}, {{Attr: "sender_domain"}}, {{Attr: "recipient_domain"}},
		{{Attr: "client_address"}}, {{Attr: "client_address", V4Prefix: 24, V6Prefix: 64}},
		{{Attr: "client_name"}}, {{Attr: "reverse_client_name"}}, {{Attr: "helo_name"}}, {{Attr: "sasl_username"}},
		{{Attr: "policy_context"}}, {{Attr: "instance"}}, {{Attr: "client_port"}}, {{Attr: "class"}},
		{{Attr: "ccert_fingerprint"}}, // any other attribute, by its Postfix name
		{{Attr: "sender"}, {Attr: "client_address", V4Prefix: 24, V6Prefix: 64}, {Attr: "class"}},
		{{Attr: "helo_name"}, {Attr: "sender_domain"}, {Attr: "recipient"}},
	}
	counts := []vocab.Counted{vocab.CountMessages, vocab.CountRecipients, vocab.CountConnections}
	for i, k := range kinds {
		for _, c := range counts {
			rules = append(rules, PolicyRule{
				Name: fmt.Sprintf("r%d-%s", i, c.String()), Count: c, Key: k, Limits: limits,
				// Leaky: a refusal by a later rule undoes the earlier
				// rules' counts, so Undo is exercised too.
				Mode: limiter.Leaky, Rollback: c == vocab.CountRecipients,
			})
		}
	}
	f := policyFixture(t, rules...)
	st := &slotStore{Store: f.store}
	f.g.lim = limiter.New(limiter.Options{Store: st, Clock: f.clk, Logger: slog.New(slog.DiscardHandler)})

	values := []string{"plain", "{tag}", "a}b{c", "}{", "{}", "{", "x{y}z{w}", ""}
	for i, v := range values {
		var ps PolicySession
		for m := range 12 { // past the limits of 10, so later rules refuse and earlier ones undo
			base := PolicyRequest{
				ClientAddress: fmt.Sprintf("198.51.100.%d", i+1), ClientPort: v, ClientName: v + ".example",
				ReverseClientName: v, HeloName: v, Sender: v + "@" + v + ".example", SASLUsername: v,
				PolicyContext: v, Instance: fmt.Sprintf("%d.%d", i, m),
				Attr: func(name string) (string, bool) { return v, name == "ccert_fingerprint" },
			}
			for _, state := range []string{vocab.StateRcpt, vocab.StateEOM} {
				q := base
				q.ProtocolState, q.Recipient, q.RecipientCount = state, "rcpt"+v+"@"+v+".example", 1
				if _, err := f.g.PolicyCheck(f.ctx, &ps, &q); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if st.calls < len(rules) {
		t.Fatalf("only %d multi-key calls for %d rules: the test exercised little", st.calls, len(rules))
	}
	for _, s := range st.spread {
		t.Error(s)
	}
}
