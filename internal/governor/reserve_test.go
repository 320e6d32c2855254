package governor

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"sluice/internal/hostmask"
	"sluice/internal/limiter"
)

// observed keeps every verdict.
type observed struct{ v []Verdict }

func (o *observed) Observe(v Verdict) { o.v = append(o.v, v) }

func reserveFixture(t *testing.T, capacity int64) (*fixture, *observed) {
	t.Helper()
	f := newFixture(t, []limiter.Class{
		{Name: "known", Masks: []hostmask.Mask{hostmask.MustParse("192.0.2.0/24")}, Reserve: 3},
		{Name: "rest", Masks: []hostmask.Mask{hostmask.MustParse("*")}},
	}, AnvilRules{Postfix: AnvilLimits{Count: 50}})
	f.g.capacity = Capacity{Sessions: capacity, From: "test"}
	f.g.reserved = f.g.classes.Reserved()
	obs := &observed{}
	f.g.obs = obs
	return f, obs
}

// TestReserveMilter: over a capacity of 10, with 3 sessions reserved for
// "known", strangers get 7 and are then refused at CONNECT with a reply
// naming the reservation; known peers still open their 3, and one more
// once a stranger leaves.
func TestReserveMilter(t *testing.T) {
	f, obs := reserveFixture(t, 10)
	var strangers [8]MilterSession
	for i := range strangers {
		// each from a /24 of its own, so the fair share never binds
		a := netip.MustParseAddr(fmt.Sprintf("198.51.%d.1", 100+i))
		got := f.g.MilterConnect(f.ctx, &strangers[i], "", a, "1000")
		if i < 7 && got != "" {
			t.Fatalf("stranger %d refused: %q", i+1, got)
		}
		if i == 7 && (!strings.HasPrefix(got, "421 4.7.0 ") || !strings.Contains(got, "reserved")) {
			t.Fatalf("stranger 8 (over capacity minus the reservation): %q, want a 421 naming the reservation", got)
		}
	}
	if n := f.held(t, "rest"); n != 7 {
		t.Fatalf("rest holds %d after the refusal, want 7 (the refused session's slot given back)", n)
	}
	last := obs.v[len(obs.v)-1]
	if last.Rule != "reserve" || !last.Refused || last.Key != "rest" || last.Limit.N != 10 || last.Count != 7 ||
		last.Client != netip.MustParseAddr("198.51.107.1") {
		t.Fatalf("verdict %+v", last)
	}
	var known [4]MilterSession
	for i := range known {
		got := f.g.MilterConnect(f.ctx, &known[i], "", netip.MustParseAddr(fmt.Sprintf("192.0.2.%d", i+1)), "1000")
		if i < 3 && got != "" {
			t.Fatalf("known %d refused within its reservation: %q", i+1, got)
		}
		if i == 3 && got == "" {
			t.Fatal("known's 4th session admitted with the MTA full")
		}
	}
	f.g.MilterClose(f.ctx, &strangers[0])
	if got := f.g.MilterConnect(f.ctx, &known[3], "", netip.MustParseAddr("192.0.2.4"), "1000"); got != "" {
		t.Fatalf("known's 4th session with a free session: %q", got)
	}
	o, err := f.g.Occupancy(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o.Sessions != 10 || o.Unused != 0 || o.Claimed != 10 || o.Held[0] != 4 || o.Held[1] != 6 {
		t.Fatalf("occupancy %+v", o)
	}
}

// TestReserveAnvil: the anvil door refuses the same way, reporting a
// count over smtpd's limit, and keeps no slot for the refused session.
func TestReserveAnvil(t *testing.T) {
	f, obs := reserveFixture(t, 4)
	var st [3]AnvilStream
	for i := range st {
		count, _ := f.connect(t, &st[i], fmt.Sprintf("smtp:198.51.100.%d", i+1))
		if i < 1 && count > 50 {
			t.Fatalf("stranger %d refused (count %d)", i+1, count)
		}
		if i >= 1 && count <= 50 {
			t.Fatalf("stranger %d admitted (count %d) over capacity 4 minus 3 reserved", i+1, count)
		}
	}
	if n := f.held(t, "rest"); n != 1 {
		t.Fatalf("rest holds %d, want 1", n)
	}
	if last := obs.v[len(obs.v)-1]; last.Rule != "reserve" || last.Door != "anvil" || !last.Refused {
		t.Fatalf("verdict %+v", last)
	}
	var k [3]AnvilStream
	for i := range k {
		if count, _ := f.connect(t, &k[i], fmt.Sprintf("smtp:192.0.2.%d", i+1)); count > 50 {
			t.Fatalf("known %d refused within its reservation (count %d)", i+1, count)
		}
	}
}

// TestReserveUnknownCapacity: without a capacity nothing is reserved.
func TestReserveUnknownCapacity(t *testing.T) {
	f, _ := reserveFixture(t, 0)
	var s [20]MilterSession
	for i := range s {
		if got := f.g.MilterConnect(f.ctx, &s[i], "", netip.MustParseAddr(fmt.Sprintf("198.51.100.%d", i+1)), "1"); got != "" {
			t.Fatalf("session %d refused without a capacity: %q", i+1, got)
		}
	}
}
