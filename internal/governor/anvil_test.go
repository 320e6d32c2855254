package governor

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"sluice/internal/clock"
	"sluice/internal/hostmask"
	"sluice/internal/limiter"
	"sluice/internal/store/memory"
	"sluice/internal/store/storetest"
	"sluice/internal/testutil/logbuf"
)

func i64(v int64) *int64 { return &v }

type fixture struct {
	g     *Governor
	store limiter.Store // the store g's limiter counts in
	clk   *clock.Fake
	ctx   context.Context
}

func newFixture(t testing.TB, classes []limiter.Class, rules AnvilRules) *fixture {
	t.Helper()
	s := memory.New(memory.Options{})
	t.Cleanup(func() { s.Close() })
	clk := clock.NewFake(storetest.T0)
	lim := limiter.New(limiter.Options{Store: s, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	if classes == nil {
		classes = []limiter.Class{{Name: "all", Masks: []hostmask.Mask{hostmask.MustParse("*")}}}
	}
	cs, err := limiter.NewClasses(classes)
	if err != nil {
		t.Fatal(err)
	}
	if rules.Unit == 0 {
		rules.Unit = 60 * time.Second
	}
	return &fixture{g: New(Options{Limiter: lim, Classes: cs, Anvil: rules, Logger: slog.New(slog.DiscardHandler)}), store: s, clk: clk, ctx: context.Background()}
}

func (f *fixture) connect(t *testing.T, st *AnvilStream, ident string) (int64, int64) {
	t.Helper()
	c, r, err := f.g.AnvilConnect(f.ctx, st, ident)
	if err != nil {
		t.Fatal(err)
	}
	return c, r
}

func (f *fixture) lookup(t *testing.T, ident string) AnvilCounts {
	t.Helper()
	c, err := f.g.AnvilLookup(f.ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const ip = "smtp:192.0.2.10"

func TestAnvilCountsAndLinking(t *testing.T) {
	f := newFixture(t, nil, AnvilRules{})
	var a, b AnvilStream
	if c, r := f.connect(t, &a, ip); c != 1 || r != 1 {
		t.Fatalf("first connect: count %d rate %d", c, r)
	}
	if c, r := f.connect(t, &b, ip); c != 2 || r != 2 {
		t.Fatalf("second stream: count %d rate %d", c, r)
	}
	// A stream holds one entry: a second connect on stream a drops its
	// previous connection first (anvil's ANVIL_LOCAL_ADD_ONE).
	if c, r := f.connect(t, &a, ip); c != 2 || r != 3 {
		t.Fatalf("reconnect on the same stream: count %d rate %d", c, r)
	}
	// Disconnect for an ident the stream does not hold changes nothing.
	f.g.AnvilDisconnect(f.ctx, &a, "smtp:198.51.100.1")
	if got := f.lookup(t, ip).Count; got != 2 {
		t.Fatalf("count %d after unrelated disconnect", got)
	}
	f.g.AnvilDisconnect(f.ctx, &a, ip)
	f.g.AnvilDisconnect(f.ctx, &a, ip) // twice: no effect
	if got := f.lookup(t, ip).Count; got != 1 {
		t.Fatalf("count %d after disconnect", got)
	}
	// A stream that goes away drops what it held.
	f.g.AnvilClose(f.ctx, &b)
	if got := f.lookup(t, ip).Count; got != 0 {
		t.Fatalf("count %d after close", got)
	}
}

func TestAnvilRatesWindow(t *testing.T) {
	f := newFixture(t, nil, AnvilRules{})
	var st AnvilStream
	f.connect(t, &st, ip)
	for want := int64(1); want <= 3; want++ {
		r, err := f.g.AnvilEvent(f.ctx, &st, AnvilMail, ip)
		if err != nil || r != want {
			t.Fatalf("message %d: rate %d %v", want, r, err)
		}
	}
	if r, _ := f.g.AnvilEvent(f.ctx, &st, AnvilRcpt, ip); r != 1 {
		t.Fatalf("recipient rate %d", r)
	}
	if r, _ := f.g.AnvilNewTLSStatus(f.ctx, ip); r != 0 {
		t.Fatalf("newtls_status %d", r)
	}
	f.g.AnvilEvent(f.ctx, &st, AnvilNewTLS, ip)
	if r, _ := f.g.AnvilNewTLSStatus(f.ctx, ip); r != 1 {
		t.Fatalf("newtls_status after newtls %d", r)
	}
	got := f.lookup(t, ip)
	if got.Count != 1 || got.Rates != [numAnvilEvents]int64{1, 3, 1, 1, 0, 0} {
		t.Fatalf("lookup %+v", got)
	}
	// Stale after start + unit < now (whole seconds): all rates together.
	f.clk.Advance(61 * time.Second)
	if got := f.lookup(t, ip); got.Rates != [numAnvilEvents]int64{} || got.Count != 1 {
		t.Fatalf("stale lookup %+v", got)
	}
	if r, _ := f.g.AnvilEvent(f.ctx, &st, AnvilMail, ip); r != 1 {
		t.Fatalf("message rate after the unit: %d", r)
	}
}

func TestAnvilEventOnUnknownIdent(t *testing.T) {
	// After sluice restarts, smtpd sends "message" for a session it
	// connected before: anvil registers a connection linked to the stream.
	f := newFixture(t, nil, AnvilRules{})
	var st AnvilStream
	if r, err := f.g.AnvilEvent(f.ctx, &st, AnvilMail, ip); err != nil || r != 1 {
		t.Fatalf("rate %d %v", r, err)
	}
	if got := f.lookup(t, ip); got.Count != 1 || got.Rates[AnvilConn] != 1 {
		t.Fatalf("lookup %+v", got)
	}
	f.g.AnvilDisconnect(f.ctx, &st, ip)
	if got := f.lookup(t, ip).Count; got != 0 {
		t.Fatalf("count %d", got)
	}
	// Another stream's event for an ident held elsewhere does not link.
	var a, b AnvilStream
	f.connect(t, &a, ip)
	f.g.AnvilEvent(f.ctx, &b, AnvilRcpt, ip)
	if got := f.lookup(t, ip).Count; got != 1 {
		t.Fatalf("count %d, want 1", got)
	}
}

func TestAnvilClassLimitsScaled(t *testing.T) {
	classes := []limiter.Class{
		{Name: "partners", Masks: []hostmask.Mask{hostmask.MustParse("192.0.2.0/24")}},
		{Name: "trusted", Masks: []hostmask.Mask{hostmask.MustParse("198.51.100.0/24")}},
		{Name: "rest", Masks: []hostmask.Mask{hostmask.MustParse("*")}},
	}
	rules := AnvilRules{
		Postfix: AnvilLimits{Count: 50, Rates: [numAnvilEvents]int64{AnvilMail: 10}},
		Classes: map[string]ClassLimits{
			"partners": {Count: i64(2), Rates: [numAnvilEvents]*int64{AnvilMail: i64(100)}},
			"trusted":  {Count: i64(0)},
		},
	}
	f := newFixture(t, classes, rules)
	// partners: smtpd refuses when reported > 50; class limit 2.
	var streams [3]AnvilStream
	var reported []int64
	for i := range streams {
		c, _ := f.connect(t, &streams[i], ip)
		reported = append(reported, c)
	}
	if reported[0] > 50 || reported[1] > 50 || reported[2] <= 50 {
		t.Fatalf("partners counts reported %v: want <=50, <=50, >50", reported)
	}
	// Message rate: class allows 100 where smtpd allows 10.
	var st AnvilStream
	f.connect(t, &st, ip)
	for i := 1; i <= 101; i++ {
		r, _ := f.g.AnvilEvent(f.ctx, &st, AnvilMail, ip)
		if over := r > 10; over != (i > 100) {
			t.Fatalf("message %d reported %d", i, r)
		}
	}
	// trusted: no count cap, reported at most smtpd's limit.
	for range 60 {
		var s AnvilStream
		if c, _ := f.connect(t, &s, "smtp:198.51.100.7"); c > 50 {
			t.Fatalf("trusted client reported %d", c)
		}
	}
	// rest: the true figure.
	var r AnvilStream
	if c, _ := f.connect(t, &r, "smtp:203.0.113.1"); c != 1 {
		t.Fatalf("rest reported %d", c)
	}
}

func TestAnvilClassRefuseCap(t *testing.T) {
	classes := []limiter.Class{
		{Name: "net", Masks: []hostmask.Mask{hostmask.MustParse("192.0.2.0/24")}, Refuse: 2, Queue: 2},
		{Name: "rest", Masks: []hostmask.Mask{hostmask.MustParse("*")}},
	}
	f := newFixture(t, classes, AnvilRules{Postfix: AnvilLimits{Count: 50}})
	var a, b, c, d AnvilStream
	f.connect(t, &a, "smtp:192.0.2.1")
	f.connect(t, &b, "smtp:192.0.2.2")
	if n, _ := f.connect(t, &c, "smtp:192.0.2.3"); n != 51 {
		t.Fatalf("third session of a full class reported %d, want 51", n)
	}
	f.g.AnvilClose(f.ctx, &c)
	f.g.AnvilDisconnect(f.ctx, &a, "smtp:192.0.2.1")
	if n, _ := f.connect(t, &d, "smtp:192.0.2.4"); n != 1 {
		t.Fatalf("after a slot freed: reported %d, want 1", n)
	}
	if held, _ := f.g.lim.Held(f.ctx, classes[0].LeaseKey()); held != 2 {
		t.Fatalf("class holds %d sessions, want 2", held)
	}
	f.g.AnvilClose(f.ctx, &b)
	f.g.AnvilClose(f.ctx, &d)
	if held, _ := f.g.lim.Held(f.ctx, classes[0].LeaseKey()); held != 0 {
		t.Fatalf("class leaked %d sessions", held)
	}
}

func TestScale(t *testing.T) {
	cases := []struct {
		actual int64
		class  *int64
		pf     int64
		want   int64
	}{
		{5, nil, 50, 5},
		{5, i64(2), 0, 5},
		{99, i64(0), 50, 50},
		{3, i64(0), 50, 3},
		{1, i64(2), 50, 25},
		{2, i64(2), 50, 50},
		{3, i64(2), 50, 75},
		{100, i64(100), 10, 10},
		{101, i64(100), 10, 11},
		{1 << 40, i64(1), 50, 1<<31 - 1},
	}
	for _, c := range cases {
		if got := scale(c.actual, c.class, c.pf); got != c.want {
			t.Errorf("scale(%d, %v, %d) = %d, want %d", c.actual, c.class, c.pf, got, c.want)
		}
	}
}

func TestAnvilPeer(t *testing.T) {
	cases := map[string]string{
		"smtp:192.0.2.1":                "192.0.2.1/32",
		"smtp:2001:db8::1":              "2001:db8::1/128",
		"submission:2001:db8::/84":      "2001:db8::/84",
		"smtp:unknown":                  "invalid Prefix",
		"127.0.0.1:2525:192.0.2.7":      "192.0.2.7/32",
		"127.0.0.1:2525:2001:db8::1":    "2001:db8::1/128",
		"mx.example.org:25:2001:db8::5": "2001:db8::5/128",
		"[::1]:25:2001:db8::1":          "2001:db8::1/128",
		"[::1]:25:198.51.100.1":         "198.51.100.1/32",
		"[::1]25:198.51.100.1":          "invalid Prefix",
		"nocolon":                       "invalid Prefix",
	}
	for ident, want := range cases {
		if got := AnvilPeer(ident).Net.String(); got != want {
			t.Errorf("AnvilPeer(%q) = %s, want %s", ident, got, want)
		}
	}
}

// TestAnvilClassRefusalLogged: a figure over a class's own limit, which
// smtpd refuses and logs scaled ("140" for 7 connections), is logged at
// INFO with the true figure, once per class and figure per window, with a
// summary of the rest; a figure within the limit is not.
func TestAnvilClassRefusalLogged(t *testing.T) {
	classes := []limiter.Class{{Name: "partners", Masks: []hostmask.Mask{hostmask.MustParse("*")}}}
	rules := AnvilRules{
		Postfix: AnvilLimits{Count: 50, Rates: [numAnvilEvents]int64{AnvilConn: 100}},
		Classes: map[string]ClassLimits{"partners": {Rates: [numAnvilEvents]*int64{AnvilConn: i64(5)}}},
	}
	f := newFixture(t, classes, rules)
	var buf logbuf.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	rl := NewRefusalLog(log, f.clk, 0)
	f.g.refusals, f.g.log = rl, log
	var st AnvilStream
	for i := 1; i <= 9; i++ {
		_, rate := f.connect(t, &st, ip)
		if (rate > 100) != (i > 5) {
			t.Fatalf("connection %d: reported rate %d", i, rate)
		}
	}
	info := buf.Lines("level=INFO")
	if len(info) != 1 || !strings.Contains(info[0], "anvil: over the class's limit") ||
		!strings.Contains(info[0], "limit=\"connection rate\" count=6 class_limit=5 reported=120 smtpd_limit=100") {
		t.Fatalf("INFO lines, want one with the true count 6:\n%s", strings.Join(info, "\n"))
	}
	f.clk.Advance(time.Minute)
	rl.Flush()
	if info = buf.Lines("level=INFO"); len(info) != 2 || !strings.Contains(info[1], "3 more refused") {
		t.Fatalf("after the window, want a summary of 3 more:\n%s", strings.Join(info, "\n"))
	}
}

// TestAnvilStreamClassFollowsReload: a stream keeps what its last ident
// derives to (keys, class), but a reload's class table, or another ident,
// is matched afresh: after a reload that moves a client out of the class
// scaling its message rate, its stream reports the true figure.
func TestAnvilStreamClassFollowsReload(t *testing.T) {
	partners := []limiter.Class{
		{Name: "partners", Masks: []hostmask.Mask{hostmask.MustParse("192.0.2.0/24")}},
		{Name: "rest", Masks: []hostmask.Mask{hostmask.MustParse("*")}},
	}
	rules := AnvilRules{
		Unit:    time.Minute,
		Postfix: AnvilLimits{Count: 50, Rates: [numAnvilEvents]int64{AnvilMail: 10}},
		Classes: map[string]ClassLimits{"partners": {Rates: [numAnvilEvents]*int64{AnvilMail: i64(100)}}},
	}
	f := newFixture(t, partners, rules)
	var st AnvilStream
	f.connect(t, &st, ip)
	for i := 1; i <= 11; i++ {
		if r, err := f.g.AnvilEvent(f.ctx, &st, AnvilMail, ip); err != nil || r > 10 {
			t.Fatalf("partners message %d reported %d, %v: want <= 10", i, r, err)
		}
	}
	// Another ident on the same stream: its own class (rest, no override).
	const other = "smtp:203.0.113.1"
	for i := int64(1); i <= 11; i++ {
		if r, err := f.g.AnvilEvent(f.ctx, &st, AnvilMail, other); err != nil || r != i {
			t.Fatalf("rest message %d reported %d, %v: want the true figure", i, r, err)
		}
	}
	f.connect(t, &st, ip)
	// The reload: the same store and limits, partners now another network.
	cs, err := limiter.NewClasses([]limiter.Class{
		{Name: "partners", Masks: []hostmask.Mask{hostmask.MustParse("198.51.100.0/24")}},
		partners[1],
	})
	if err != nil {
		t.Fatal(err)
	}
	g2 := New(Options{Limiter: f.g.lim, Classes: cs, Anvil: rules, Logger: slog.New(slog.DiscardHandler)})
	if r, err := g2.AnvilEvent(f.ctx, &st, AnvilMail, ip); err != nil || r != 12 {
		t.Fatalf("after the reload, message 12 reported %d, %v: want the true figure, 12", r, err)
	}
}
