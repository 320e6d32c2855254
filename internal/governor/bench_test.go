package governor

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"sluice/internal/limiter"

	"sluice/internal/rules"
)

// benchStep is how far the fake clock moves per iteration, so the
// 60-second windows roll over every 6,000 iterations as in a live daemon.
const benchStep = 10 * time.Millisecond

// BenchmarkAnvilSession is one smtpd session as anvil sees it: connect,
// two messages, three recipients, disconnect (7 requests).
func BenchmarkAnvilSession(b *testing.B) {
	f := newFixture(b, nil, AnvilRules{})
	idents := make([]string, 1000)
	for i := range idents {
		idents[i] = fmt.Sprintf("smtp:10.1.%d.%d", i>>8, i&255)
	}
	var st AnvilStream
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		id := idents[i%len(idents)]
		if _, _, err := f.g.AnvilConnect(f.ctx, &st, id); err != nil {
			b.Fatal(err)
		}
		for _, ev := range []AnvilEvent{AnvilMail, AnvilRcpt, AnvilRcpt, AnvilMail, AnvilRcpt} {
			if _, err := f.g.AnvilEvent(f.ctx, &st, ev, id); err != nil {
				b.Fatal(err)
			}
		}
		f.g.AnvilDisconnect(f.ctx, &st, id)
		f.clk.Advance(benchStep)
		i++
	}
	// Each ident connects once per len(idents) iterations: with windows
	// rolling over, its window holds at most a minute's worth of them.
	c, err := f.g.AnvilLookup(f.ctx, idents[0])
	if err != nil {
		b.Fatal(err)
	}
	if most := int64(time.Minute/(benchStep*time.Duration(len(idents)))) + 1; c.Rates[AnvilConn] > most {
		b.Fatalf("%d connections in %s's window, at most %d if windows roll over", c.Rates[AnvilConn], idents[0], most)
	}
}

// BenchmarkPolicyMessage is one message of two recipients as smtpd asks
// about it (two RCPT queries, one END-OF-MESSAGE) under a sender rule and
// a client-network rule.
func BenchmarkPolicyMessage(b *testing.B) {
	f := policyFixture(b,
		PolicyRule{Name: "sender", Count: rules.CountMessages, Key: []KeyPart{{Attr: "sender"}}, Limits: []limiter.Limit{lim("1000000/60s exact")}},
		PolicyRule{Name: "net", Count: rules.CountRecipients, Key: []KeyPart{{Attr: "client_address", V4Prefix: 24, V6Prefix: 64}}, Limits: []limiter.Limit{lim("1000000/60s smooth")}},
	)
	senders := make([]string, 1000)
	for i := range senders {
		senders[i] = fmt.Sprintf("user%d@sender%d.example", i, i%100)
	}
	var ps PolicySession
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s := senders[i%len(senders)]
		inst := strconv.Itoa(i)
		for _, st := range []string{rules.StateRcpt, rules.StateRcpt, rules.StateEOM} {
			q := PolicyRequest{ProtocolState: st, ClientAddress: "192.0.2.7", Sender: s, Instance: inst, RecipientCount: 2}
			if _, err := f.g.PolicyCheck(f.ctx, &ps, &q); err != nil {
				b.Fatal(err)
			}
		}
		f.clk.Advance(benchStep)
		i++
	}
}
