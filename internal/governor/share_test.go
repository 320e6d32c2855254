package governor

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"sluice/internal/hostmask"
	"sluice/internal/limiter"
	"sluice/internal/store/storetest"
)

func shareFixture(t *testing.T, capacity int64) (*fixture, *observed) {
	t.Helper()
	f, obs := reserveFixture(t, capacity)
	return f, obs
}

// floodNet is the address of bot i of network n (198.18.n.i).
func floodNet(n, i int) netip.Addr { return netip.MustParseAddr(fmt.Sprintf("198.18.%d.%d", n, i+1)) }

// TestShareFlood: 50 networks flood a capacity of 103 (3 reserved for
// "known": the budget of the others is 4/5 of 100, 80). Once they hold 80
// each network is held to its fair share, a single sender from a /24 of
// its own still gets in, and as the flood's sessions end the share
// relaxes.
func TestShareFlood(t *testing.T) {
	f, obs := shareFixture(t, 103)
	const nets, tries = 50, 6
	var bots [nets][tries]MilterSession
	per := make([]int, nets)
	for i := range tries {
		for n := range nets {
			got := f.g.MilterConnect(f.ctx, &bots[n][i], "", floodNet(n, i), "1")
			if got == "" {
				per[n]++
				continue
			}
			if !strings.HasPrefix(got, "421 4.7.0 ") || !strings.Contains(got, "198.18."+fmt.Sprint(n)+".0/24") {
				t.Fatalf("bot %d of network %d: %q, want a 421 naming its network", i, n, got)
			}
		}
	}
	total := 0
	for n := range nets {
		total += per[n]
		if per[n] > 2 {
			t.Fatalf("network %d holds %d sessions; the share of 80 among 50 networks is 1 or 2", n, per[n])
		}
	}
	if total != 80 {
		t.Fatalf("the flood holds %d sessions, want the budget 80", total)
	}
	if n := f.held(t, "rest"); n != 80 {
		t.Fatalf("class rest holds %d, want 80 (refused sessions give their slots back)", n)
	}
	last := obs.v[len(obs.v)-1]
	if last.Rule != "share" || !last.Refused || last.Key != "rest" || last.Limit.N != 1 || last.Client != floodNet(nets-1, tries-1) {
		t.Fatalf("last verdict %+v, want a share refusal with share 1 naming the client", last)
	}
	st := f.g.ShareState(Occupancy{})
	if st.Budget != 80 || st.Networks != 50 || st.Sessions != 80 || st.Share != 0 || st.Largest != 2 {
		t.Fatalf("share state %+v", st)
	}

	// A single sender from a network of its own: admitted.
	var lone MilterSession
	if got := f.g.MilterConnect(f.ctx, &lone, "", netip.MustParseAddr("203.0.113.9"), "1"); got != "" {
		t.Fatalf("a lone sender under the flood: %q", got)
	}
	if st := f.g.ShareState(Occupancy{}); st.Share != 1 || st.Networks != 51 {
		t.Fatalf("share state with the lone sender %+v", st)
	}
	// The flooders still get nothing more.
	var more MilterSession
	if got := f.g.MilterConnect(f.ctx, &more, "", floodNet(7, 200), "1"); !strings.Contains(got, "too many sessions from your network") {
		t.Fatalf("a flooder beyond its share: %q", got)
	}
	// A reserved class is not held to a share.
	var known MilterSession
	if got := f.g.MilterConnect(f.ctx, &known, "", netip.MustParseAddr("192.0.2.1"), "1"); got != "" {
		t.Fatalf("known within its reservation: %q", got)
	}

	// Relaxing: 40 networks' sessions end; network 0 may open more again.
	for n := 10; n < nets; n++ {
		for i := range tries {
			f.g.MilterClose(f.ctx, &bots[n][i])
		}
	}
	others := 1 // the lone sender
	for n := 1; n < 10; n++ {
		others += per[n]
	}
	opened := 0
	var relaxed [60]MilterSession
	for i := range relaxed {
		if f.g.MilterConnect(f.ctx, &relaxed[i], "", floodNet(0, 100+i), "1") == "" {
			opened++
		}
	}
	// The others hold less than an equal split: network 0 gets the rest
	// of the budget.
	if want := 80 - others - per[0]; opened != want {
		t.Fatalf("network 0 opened %d more sessions once the flood ended, want %d (the budget 80 less the others' %d and its own %d)",
			opened, want, others, per[0])
	}
	if st := f.g.ShareState(Occupancy{}); st.Largest != int64(80-others) || st.Sessions != 80 {
		t.Fatalf("share state after relaxing %+v", st)
	}
}

// TestShareHeadroom: a flood from more networks than there are unreserved
// sessions. Capacity 13, 3 reserved: the budget is 8 of the 10
// unreserved, and the 2 between are the headroom. Twelve networks of 3
// bots each fill all 10; every network is busy (a bot refused, for its
// share or for the reservation). When the flood's sessions end (the
// MTA's idle timeout), those networks reconnect: they get the budget, not
// the headroom, which single senders from networks of their own then
// take, one after the other. A minute later no network is busy.
func TestShareHeadroom(t *testing.T) {
	f, obs := shareFixture(t, 13)
	const nets, tries = 12, 3
	var bots [nets][tries]MilterSession
	held := 0
	for i := range tries {
		for n := range nets {
			if f.g.MilterConnect(f.ctx, &bots[n][i], "", floodNet(n, i), "1") == "" {
				held++
			}
		}
	}
	if held != 10 {
		t.Fatalf("the flood holds %d sessions, want all 10 unreserved (a first session from a network of its own fits the headroom)", held)
	}
	if st := f.g.ShareState(Occupancy{}); st.Busy != nets {
		t.Fatalf("%d busy networks, want all %d (each had a bot refused)", st.Busy, nets)
	}
	// The idle timeout ends every flood session; the bots reconnect.
	for n := range nets {
		for i := range tries {
			f.g.MilterClose(f.ctx, &bots[n][i])
		}
	}
	held = 0
	var again [nets][tries]MilterSession
	for i := range tries {
		for n := range nets {
			if f.g.MilterConnect(f.ctx, &again[n][i], "", floodNet(n, 10+i), "1") == "" {
				held++
			}
		}
	}
	if held != 8 {
		t.Fatalf("the busy networks took %d sessions again, want the budget 8 (the headroom is kept)", held)
	}
	last := obs.v[len(obs.v)-1]
	if last.Rule != "share" || last.Reason != ReasonHeadroom || !last.Refused || !strings.Contains(last.Reply, "kept for networks that asked for at most one") || last.Limit.N != 8 {
		t.Fatalf("last verdict %+v, want the headroom refusal", last)
	}
	// Single senders, each from a /24 of its own, one after another.
	for k := range 5 {
		var lone MilterSession
		a := netip.MustParseAddr(fmt.Sprintf("203.0.%d.9", k))
		if got := f.g.MilterConnect(f.ctx, &lone, "", a, "1"); got != "" {
			t.Fatalf("single sender %d under the flood: %q", k, got)
		}
		f.g.MilterClose(f.ctx, &lone)
	}
	// After BusyFor without a refusal a network is forgotten.
	f.clk.Advance(BusyFor)
	var late MilterSession
	if got := f.g.MilterConnect(f.ctx, &late, "", floodNet(11, 100), "1"); got != "" {
		t.Fatalf("a network refused over a minute ago: %q, want the headroom", got)
	}
	if st := f.g.ShareState(Occupancy{}); st.Busy != 0 || st.Sessions != 9 {
		t.Fatalf("share state a minute on %+v, want no network remembered and 9 sessions", st)
	}
}

// TestShareBusyWithoutRefusal: a network that took several sessions while
// everyone fitted (the first arrivals of a flood, never refused) is busy
// too: once its sessions end it gets the budget, not the headroom. A
// network that held one session is not.
func TestShareBusyWithoutRefusal(t *testing.T) {
	f, _ := shareFixture(t, 13) // budget 8, headroom 2
	var early [4]MilterSession
	for i := range early {
		if got := f.g.MilterConnect(f.ctx, &early[i], "", floodNet(0, i), "1"); got != "" {
			t.Fatalf("early bot %d within the budget: %q", i, got)
		}
	}
	var ones [4]MilterSession
	for n := range ones {
		if got := f.g.MilterConnect(f.ctx, &ones[n], "", floodNet(1+n, 0), "1"); got != "" {
			t.Fatalf("network %d's one session within the budget: %q", 1+n, got)
		}
	}
	if st := f.g.ShareState(Occupancy{}); st.Busy != 1 || st.Sessions != 8 {
		t.Fatalf("share state %+v, want 1 busy network (the one holding 4) and 8 sessions", st)
	}
	for i := range early { // the idle timeout ends them
		f.g.MilterClose(f.ctx, &early[i])
	}
	var more [4]MilterSession // four more networks of one: the budget is full again
	for n := range more {
		if got := f.g.MilterConnect(f.ctx, &more[n], "", floodNet(5+n, 0), "1"); got != "" {
			t.Fatalf("network %d's one session within the budget: %q", 5+n, got)
		}
	}
	var past MilterSession // 9 > 8, within its share of 1, but busy
	if got := f.g.MilterConnect(f.ctx, &past, "", floodNet(0, 11), "1"); !strings.Contains(got, "asked for more") {
		t.Fatalf("the busy network past the budget: %q, want the headroom refusal", got)
	}
	var fresh MilterSession
	if got := f.g.MilterConnect(f.ctx, &fresh, "", floodNet(9, 0), "1"); got != "" {
		t.Fatalf("a network not busy past the budget: %q, want the headroom", got)
	}
	// Past the budget a network holding one gets no second.
	var second MilterSession
	if got := f.g.MilterConnect(f.ctx, &second, "", floodNet(9, 1), "1"); !strings.HasPrefix(got, "421 ") {
		t.Fatalf("a second session past the budget: %q, want a refusal", got)
	}
}

// TestShareBusyBounded: the busy networks remembered stay within BusyMax
// however many networks are busy.
func TestShareBusyBounded(t *testing.T) {
	s := NewShares()
	now := storetest.T0
	for n := range BusyMax + 5000 {
		s.mark(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(n >> 8), byte(n), 0}), 24), now)
	}
	if len(s.busy) != BusyMax {
		t.Fatalf("%d networks remembered, want BusyMax %d", len(s.busy), BusyMax)
	}
	// Once they expire, a sweep makes room for new ones.
	now = now.Add(BusyFor)
	fresh := netip.MustParsePrefix("203.0.113.0/24")
	s.mark(fresh, now)
	if len(s.busy) != 1 || !s.busyLocked(fresh, now) {
		t.Fatalf("after expiry %d remembered (want 1, the new one)", len(s.busy))
	}
}

// TestShareAnvil: at anvil a network beyond its share gets a count over
// smtpd's limit, and a session anvil counted counts once when the milter
// adopts it.
func TestShareAnvil(t *testing.T) {
	f, obs := shareFixture(t, 8) // budget 4/5 of 5 = 4
	f.g.pairs = NewSessionPairs()
	var st [6]AnvilStream
	for i := range 4 {
		st[i].SetPeerPID(100 + i)
		if count, _ := f.connect(t, &st[i], fmt.Sprintf("smtp:198.18.1.%d", i+1)); count > 50 {
			t.Fatalf("bot %d refused within the budget (count %d)", i+1, count)
		}
	}
	// The milter adopts each: no second count in the share.
	var ms [4]MilterSession
	for i := range ms {
		ms[i].SetPeerPID(100 + i)
		if got := f.g.MilterConnect(f.ctx, &ms[i], "", netip.MustParseAddr(fmt.Sprintf("198.18.1.%d", i+1)), "1"); got != "" {
			t.Fatalf("milter for bot %d: %q", i+1, got)
		}
	}
	if s := f.g.shares.Total(); s != 4 {
		t.Fatalf("the share table counts %d sessions, want 4 (one per SMTP session)", s)
	}
	if count, _ := f.connect(t, &st[4], "smtp:198.18.1.77"); count <= 50 {
		t.Fatalf("fifth bot of one /24 over a budget of 4: count %d, want over smtpd's 50", count)
	}
	if last := obs.v[len(obs.v)-1]; last.Rule != "share" || last.Door != "anvil" || last.Limit.N != 4 || last.Count != 4 ||
		last.Client != netip.MustParseAddr("198.18.1.77") {
		t.Fatalf("verdict %+v", last)
	}
	if count, _ := f.connect(t, &st[5], "[2001:db8::1]:25:2001:db8:5:1::9"); count > 50 {
		t.Fatalf("a sender from its own /48: count %d", count)
	}
	f.g.AnvilDisconnect(f.ctx, &st[0], "smtp:198.18.1.1")
	f.g.MilterClose(f.ctx, &ms[0])
	if s := f.g.shares.Total(); s != 4 {
		t.Fatalf("after one session ended the table counts %d, want 4", s)
	}
	for i := range st {
		f.g.AnvilClose(f.ctx, &st[i])
	}
	if s := f.g.shares.Total(); s != 0 {
		t.Fatalf("after every session ended the table counts %d", s)
	}
}

// TestShareUnknownCapacity: without a capacity nothing is shed or counted.
func TestShareUnknownCapacity(t *testing.T) {
	f := newFixture(t, []limiter.Class{{Name: "all", Masks: []hostmask.Mask{hostmask.MustParse("*")}}}, AnvilRules{})
	var s [30]MilterSession
	for i := range s {
		if got := f.g.MilterConnect(f.ctx, &s[i], "", floodNet(1, i), "1"); got != "" {
			t.Fatalf("session %d: %q", i, got)
		}
	}
	if n := f.g.shares.Total(); n != 0 {
		t.Fatalf("counted %d without a capacity", n)
	}
}

// TestShareBudgetLessReservedExcess: sessions a reserved class holds
// beyond its reservation come out of the budget. Capacity 13, 3 reserved
// for "known": the budget is 4/5 of 10, 8; known holding 5 takes 2 of
// the unreserved sessions, so one /24 of strangers gets 6, not 8.
func TestShareBudgetLessReservedExcess(t *testing.T) {
	f, obs := shareFixture(t, 13)
	var known [5]MilterSession
	for i := range known {
		if got := f.g.MilterConnect(f.ctx, &known[i], "", netip.MustParseAddr(fmt.Sprintf("192.0.2.%d", i+1)), "1"); got != "" {
			t.Fatalf("known %d: %q", i+1, got)
		}
	}
	var bots [8]MilterSession
	admitted := 0
	for i := range bots {
		if f.g.MilterConnect(f.ctx, &bots[i], "", floodNet(3, i), "1") == "" {
			admitted++
		}
	}
	if admitted != 6 {
		t.Fatalf("one /24 opened %d sessions, want 6 (the budget 8 less known's 2 beyond its reservation)", admitted)
	}
	if last := obs.v[len(obs.v)-1]; last.Rule != "share" || last.Limit.N != 6 {
		t.Fatalf("verdict %+v, want a share refusal at 6", last)
	}
}

// BenchmarkShareTake: one admission under pressure with 1000 networks
// holding 2 sessions each over a budget of 1600 (a capacity of 2000): the
// pass over the networks that computes the share.
func BenchmarkShareTake(b *testing.B) {
	s := NewShares()
	for n := range 1000 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(n >> 8), byte(n), 0}), 24)
		s.take(p, 0, storetest.T0)
		s.take(p, 0, storetest.T0)
	}
	lone := netip.MustParsePrefix("203.0.113.0/24")
	for b.Loop() {
		if t := s.take(lone, 1600, storetest.T0); !t.ok || t.share != 1 {
			b.Fatalf("lone sender: %+v", t)
		}
		s.give(lone)
	}
}

// TestShareHeadroomIsForTheFirst: past the budget, a network within its
// share that already holds a session gets no second (the headroom's
// rule, not the share's), and one holding none gets its first.
func TestShareHeadroomIsForTheFirst(t *testing.T) {
	s := NewShares()
	a, b, c := netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("192.0.2.0/24")
	now := storetest.T0.Add(time.Hour)
	for _, n := range []netip.Prefix{a, b, b, b} { // within the budget of 4
		if d := s.take(n, 4, now); !d.ok {
			t.Fatalf("within the budget: %+v", d)
		}
	}
	// a's second: 5 > 4, the share of 4 between a (2) and b (3) is 2.
	if d := s.take(a, 4, now); d.ok || !d.headroom || d.share != 2 || d.held != 2 || d.total != 4 {
		t.Fatalf("a's second past the budget: %+v, want a headroom refusal within the share 2", d)
	}
	if d := s.take(c, 4, now); !d.ok {
		t.Fatalf("a network's first past the budget: %+v", d)
	}
}
