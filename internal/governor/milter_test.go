package governor

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"sluice/internal/clock"
	"sluice/internal/hostmask"
	"sluice/internal/limiter"
	"sluice/internal/store/memory"
	"sluice/internal/store/storetest"

	vocab "sluice/internal/rules"
)

func milterFixture(t *testing.T, rules MilterRules, policy ...PolicyRule) *fixture {
	t.Helper()
	f := newFixture(t, []limiter.Class{
		{Name: "dialup", Masks: []hostmask.Mask{hostmask.MustParse("*.dialup.example"), hostmask.MustParse("203.0.113.0/24")}, Refuse: 2},
		{Name: "rest", Masks: []hostmask.Mask{hostmask.MustParse("*")}, Refuse: 0},
	}, AnvilRules{})
	for i := range policy {
		if policy[i].Action == "" {
			policy[i].Action = "DEFER_IF_PERMIT over {rule} {count}/{limit}"
		}
		if policy[i].Stage == "" && policy[i].Count != vocab.CountConnections {
			policy[i].Stage = vocab.StateEOM
		}
	}
	f.g.policy = PolicyRules{Rules: policy, Default: "DUNNO"}
	f.g.milter = rules
	return f
}

var dialup = netip.MustParseAddr("203.0.113.7")

func TestMilterClassRefusesBeyondCap(t *testing.T) {
	f := milterFixture(t, MilterRules{})
	obs := &observed{}
	f.g.obs = obs
	var s1, s2, s3, other MilterSession
	if a := f.g.MilterConnect(f.ctx, &s1, "[203.0.113.7]", dialup, "1001"); a != "" {
		t.Fatalf("first session: %q", a)
	}
	if a := f.g.MilterConnect(f.ctx, &s2, "host.dialup.example", netip.MustParseAddr("198.51.100.9"), "1002"); a != "" {
		t.Fatalf("second session (by name): %q", a)
	}
	a := f.g.MilterConnect(f.ctx, &s3, "[203.0.113.8]", netip.MustParseAddr("203.0.113.8"), "1003")
	if want := "421 4.7.0 Too many sessions from class dialup (2/2); try again later"; a != want {
		t.Fatalf("third session: %q, want %q", a, want)
	}
	if s3.class != "dialup" {
		t.Fatalf("class %q", s3.class)
	}
	if v := obs.v[len(obs.v)-1]; !v.Refused || v.Reason != ReasonClass || v.Client != netip.MustParseAddr("203.0.113.8") {
		t.Fatalf("verdict %+v, want a class refusal naming the client (what the escalation counts)", v)
	}
	// Another class is not touched by dialup's cap.
	if a := f.g.MilterConnect(f.ctx, &other, "mx.example.org", netip.MustParseAddr("192.0.2.1"), "25"); a != "" {
		t.Fatalf("other class: %q", a)
	}
	// The refused session holds nothing; closing it frees nothing.
	f.g.MilterClose(f.ctx, &s3)
	if n := f.held(t, "dialup"); n != 2 {
		t.Fatalf("held %d after closing the refused session, want 2", n)
	}
	// Closing an admitted session frees its slot, once.
	f.g.MilterClose(f.ctx, &s1)
	f.g.MilterClose(f.ctx, &s1)
	if n := f.held(t, "dialup"); n != 1 {
		t.Fatalf("held %d after closing one session twice, want 1", n)
	}
	if a := f.g.MilterConnect(f.ctx, &s3, "[203.0.113.8]", netip.MustParseAddr("203.0.113.8"), "1004"); a != "" {
		t.Fatalf("session after a slot freed: %q", a)
	}
	// A second CONNECT on the same session (QUIT_NC reuse) gives the old
	// slot back before taking a new one.
	if a := f.g.MilterConnect(f.ctx, &s3, "[203.0.113.8]", netip.MustParseAddr("203.0.113.8"), "1005"); a != "" {
		t.Fatalf("reconnect on the same session: %q", a)
	}
	if n := f.held(t, "dialup"); n != 2 {
		t.Fatalf("held %d after a reconnect, want 2", n)
	}
	for _, s := range []*MilterSession{&s2, &s3, &other} {
		f.g.MilterClose(f.ctx, s)
	}
	if n := f.held(t, "dialup"); n != 0 {
		t.Fatalf("held %d after every session closed", n)
	}
}

func (f *fixture) held(t *testing.T, class string) int64 {
	t.Helper()
	n, err := f.g.lim.Held(f.ctx, "class\x00"+class)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestMilterRefusalTemplate(t *testing.T) {
	cls := &limiter.Class{Name: "bulk", Refuse: 5}
	if got := MilterRefusal("421 4.7.0 {class} full: {sessions} of {refuse}", cls, 5); got != "421 4.7.0 bulk full: 5 of 5" {
		t.Fatal(got)
	}
	if got := MilterRefusal("", cls, 5); !strings.HasPrefix(got, "421 4.7.0 Too many sessions from class bulk (5/5)") {
		t.Fatal(got)
	}
}

// failingStore fails every call, as an unreachable Redis does.
type failingStore struct{ limiter.Store }

var errDown = errors.New("store down")

func (failingStore) Acquire(context.Context, time.Time, string, int64, time.Duration) (limiter.Lease, int64, bool, error) {
	return limiter.Lease{}, 0, false, errDown
}

func TestMilterStoreFailure(t *testing.T) {
	for _, open := range []bool{true, false} {
		s := memory.New(memory.Options{})
		t.Cleanup(func() { s.Close() })
		lim := limiter.New(limiter.Options{Store: failingStore{s}, Clock: clock.NewFake(storetest.T0), FailOpen: open, Logger: slog.New(slog.DiscardHandler)})
		cs, err := limiter.NewClasses([]limiter.Class{{Name: "all", Masks: []hostmask.Mask{hostmask.MustParse("*")}, Refuse: 1}})
		if err != nil {
			t.Fatal(err)
		}
		g := New(Options{Limiter: lim, Classes: cs, Logger: slog.New(slog.DiscardHandler)})
		var ms MilterSession
		a := g.MilterConnect(context.Background(), &ms, "", dialup, "1")
		if open && a != "" {
			t.Errorf("fail open: %q, want the session admitted", a)
		}
		if !open && !strings.HasPrefix(a, "421 4.3.0 ") {
			t.Errorf("fail closed: %q, want 421 4.3.0", a)
		}
		g.MilterClose(context.Background(), &ms)
	}
}

// playMilter runs one message through the milter stages and returns the
// first refusal ("" when it passed).
func playMilter(f *fixture, ms *MilterSession, sender string, rcpts []string, size int64) string {
	if a := f.g.MilterMail(f.ctx, ms, sender, ""); a != "" {
		return "MAIL " + a
	}
	for _, r := range rcpts {
		if a := f.g.MilterRcpt(f.ctx, ms, r); a != "" {
			return "RCPT " + a
		}
	}
	if a := f.g.MilterData(f.ctx, ms); a != "" {
		return "DATA " + a
	}
	if a := f.g.MilterEOM(f.ctx, ms, size); a != "" {
		return "EOM " + a
	}
	return ""
}

func TestMilterPolicyRulesCountMessagesAndRecipients(t *testing.T) {
	f := milterFixture(t, MilterRules{PolicyRules: true},
		PolicyRule{Name: "msgs", Count: vocab.CountMessages, Key: []KeyPart{{Attr: "client_address"}}, Limits: []limiter.Limit{lim("3/1h exact")}},
		PolicyRule{Name: "rcpts", Count: vocab.CountRecipients, Stage: vocab.StateRcpt, Match: PolicyMatch{PolicyContext: []string{"milter"}},
			Key: []KeyPart{{Attr: "client_address"}}, Limits: []limiter.Limit{lim("7/1h exact")}},
	)
	var ms MilterSession
	if a := f.g.MilterConnect(f.ctx, &ms, "mx.example.org", netip.MustParseAddr("192.0.2.1"), "25"); a != "" {
		t.Fatal(a)
	}
	var got []string
	for range 4 {
		got = append(got, playMilter(f, &ms, "<a@example.org>", []string{"<x@example.net>", "<y@example.net>"}, 1000))
	}
	// Messages 1-3 pass (6 recipients); the 4th: its 1st recipient is the
	// 7th and passes, its 2nd is refused at RCPT.
	want := []string{"", "", "", "RCPT DEFER_IF_PERMIT over rcpts 7/7"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("message %d: %q, want %q (all: %q)", i+1, got[i], want[i], got)
		}
	}
	// A 5th message with one recipient: recipients are full (7/7) now.
	if a := playMilter(f, &ms, "<a@example.org>", []string{"<z@example.net>"}, 10); !strings.HasPrefix(a, "RCPT DEFER_IF_PERMIT over rcpts") {
		t.Fatalf("5th message: %q", a)
	}
	f.g.MilterClose(f.ctx, &ms)
}

func TestMilterAbortTakesBackRollbackCounts(t *testing.T) {
	f := milterFixture(t, MilterRules{PolicyRules: true},
		PolicyRule{Name: "msgs", Count: vocab.CountMessages, Stage: vocab.StateRcpt, Rollback: true, Key: []KeyPart{{Attr: "sender"}}, Limits: []limiter.Limit{lim("2/1h exact")}},
	)
	var ms MilterSession
	f.g.MilterConnect(f.ctx, &ms, "", netip.MustParseAddr("192.0.2.1"), "25")
	// Ten transactions aborted after RCPT: none counts.
	for range 10 {
		if a := f.g.MilterMail(f.ctx, &ms, "a@example.org", ""); a != "" {
			t.Fatal(a)
		}
		if a := f.g.MilterRcpt(f.ctx, &ms, "x@example.net"); a != "" {
			t.Fatalf("RCPT of an aborted transaction refused: %q", a)
		}
		f.g.MilterAbort(f.ctx, &ms)
	}
	// Two complete messages pass, the third is refused.
	for i := range 3 {
		a := playMilter(f, &ms, "a@example.org", []string{"x@example.net"}, 10)
		if (i < 2) != (a == "") {
			t.Fatalf("message %d: %q", i+1, a)
		}
	}
	// A session closed mid-transaction gives its count back too.
	var ms2 MilterSession
	f.clk.Advance(2 * time.Hour)
	f.g.MilterConnect(f.ctx, &ms2, "", netip.MustParseAddr("192.0.2.2"), "26")
	f.g.MilterMail(f.ctx, &ms2, "b@example.org", "")
	f.g.MilterRcpt(f.ctx, &ms2, "x@example.net")
	f.g.MilterClose(f.ctx, &ms2)
	f.g.MilterConnect(f.ctx, &ms2, "", netip.MustParseAddr("192.0.2.2"), "27")
	for i := range 2 {
		if a := playMilter(f, &ms2, "b@example.org", []string{"x@example.net"}, 10); a != "" {
			t.Fatalf("message %d after a closed transaction: %q", i+1, a)
		}
	}
	f.g.MilterClose(f.ctx, &ms)
	f.g.MilterClose(f.ctx, &ms2)
}

func TestMilterWithoutPolicyRulesCountsNothing(t *testing.T) {
	f := milterFixture(t, MilterRules{PolicyRules: false},
		PolicyRule{Name: "msgs", Count: vocab.CountMessages, Key: []KeyPart{{Attr: "client_address"}}, Limits: []limiter.Limit{lim("1/1h exact")}},
	)
	var ms MilterSession
	f.g.MilterConnect(f.ctx, &ms, "", netip.MustParseAddr("192.0.2.1"), "25")
	for range 5 {
		if a := playMilter(f, &ms, "a@example.org", []string{"x@example.net"}, 10); a != "" {
			t.Fatalf("refused without policy rules: %q", a)
		}
	}
	f.g.MilterClose(f.ctx, &ms)
}
