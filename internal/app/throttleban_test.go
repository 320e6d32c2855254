package app

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"sluice/internal/config"
	"sluice/internal/limiter"
	"sluice/internal/throttle"
)

// banGuardAt is a guard on in-memory marks, with its clock at *now.
func banGuardAt(t *testing.T, now *time.Time) *banGuard {
	t.Helper()
	clock := func() time.Time { return *now }
	marks, err := limiter.NewMemoryMarks("", clock)
	if err != nil {
		t.Fatal(err)
	}
	g := newBanGuard(marks, slog.New(slog.DiscardHandler))
	g.now = clock
	return g
}

var (
	resDelivered = []throttle.ResultLine{{Kind: 'r'}, {Kind: 'K', Text: "accepted"}}
	resBanned    = []throttle.ResultLine{{Kind: 'D', Text: "Connected to 127.0.0.1 but sender was rejected. Remote host said: 554 too many"}}
	resRefused   = []throttle.ResultLine{{Kind: 'D', Text: "Connected to 127.0.0.1 but sender was rejected. Remote host said: 553 no"}}
	resSlow      = []throttle.ResultLine{{Kind: 'Z', Text: "Connected to 127.0.0.1 but sender was rejected. Remote host said: 421 too many connections"}}
)

// The cool-off doubles for a ban within max_cool_off of the last one's
// end, up to max_cool_off, and starts again after a quiet max_cool_off.
func TestBanCoolOffGrows(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	g := banGuardAt(t, &now)
	bp := &banPolicy{BanSpec: config.BanSpec{CoolOff: time.Minute, MaxCoolOff: 3 * time.Minute}, signs: throttle.NewSigns([]string{"too many"}), limit: 10, period: time.Second}
	ctx := context.Background()
	for i, want := range []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute, 3 * time.Minute} {
		if v := g.judge(ctx, "p *", bp, resBanned); v != "T" {
			t.Fatalf("ban %d: verdict %q", i+1, v)
		}
		until, _ := g.admit(ctx, "p *")
		if got := until.Sub(now); got != want {
			t.Errorf("ban %d: suspended for %s, want %s", i+1, got, want)
		}
		// A second report of the same ban changes nothing.
		g.judge(ctx, "p *", bp, resBanned)
		if again, _ := g.admit(ctx, "p *"); !again.Equal(until) {
			t.Errorf("ban %d: a second report moved the suspension to %v", i+1, again)
		}
		now = until
		if u, _ := g.admit(ctx, "p *"); !u.IsZero() {
			t.Errorf("ban %d: still suspended at its end", i+1)
		}
	}
	now = now.Add(3*time.Minute + time.Second) // quiet for max_cool_off
	g.judge(ctx, "p *", bp, resBanned)
	if until, _ := g.admit(ctx, "p *"); until.Sub(now) != time.Minute {
		t.Errorf("after a quiet max_cool_off: suspended for %s, want the first cool-off again", until.Sub(now))
	}
}

// ban_after failed sends in a row are a ban; a delivery resets the
// count; the failure that reaches it is made temporary, the ones before
// are not.
func TestBanAfterFailures(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	g := banGuardAt(t, &now)
	bp := &banPolicy{BanSpec: config.BanSpec{After: 3, CoolOff: time.Minute, MaxCoolOff: time.Hour}, limit: 10, period: time.Second}
	ctx := context.Background()
	steps := []struct {
		res       []throttle.ResultLine
		verdict   string
		suspended bool
	}{
		{resRefused, ".", false},
		{resRefused, ".", false},
		{resDelivered, "..", false},
		{resRefused, ".", false},
		{resRefused, ".", false},
		{resRefused, "T", true},
		{resRefused, "T", true}, // a send under way when the ban began
	}
	for i, s := range steps {
		now = now.Add(time.Millisecond)
		if v := g.judge(ctx, "p *", bp, s.res); v != s.verdict {
			t.Errorf("step %d: verdict %q, want %q", i+1, v, s.verdict)
		}
		if until, _ := g.admit(ctx, "p *"); !until.IsZero() != s.suspended {
			t.Errorf("step %d: suspended %v, want %v", i+1, !until.IsZero(), s.suspended)
		}
	}
}

// adapt: a ban halves what the relay took in the last period; a
// throttling answer lowers at most once a period; a clean adapt_window
// after the suspension raises by one; at the configured limit the learned
// one is forgotten.
func TestBanAdapt(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	g := banGuardAt(t, &now)
	bp := &banPolicy{BanSpec: config.BanSpec{Adapt: true, CoolOff: 10 * time.Second, MaxCoolOff: time.Hour, AdaptWindow: 5 * time.Second},
		signs: throttle.NewSigns([]string{"too many"}), limit: 20, period: time.Second}
	ctx := context.Background()
	for range 8 {
		now = now.Add(50 * time.Millisecond)
		g.judge(ctx, "p *", bp, resDelivered)
	}
	g.judge(ctx, "p *", bp, resBanned)
	if n := g.limit(ctx, "p *", bp); n != 4 {
		t.Fatalf("after a ban with 8 delivered in the period: limit %d, want 4", n)
	}
	now = now.Add(10 * time.Second) // the cool-off ends
	g.judge(ctx, "p *", bp, resBanned)
	if n := g.limit(ctx, "p *", bp); n != 4 {
		t.Errorf("a ban right after the cool-off, nothing delivered: limit %d, want 4 (unchanged)", n)
	}
	now = now.Add(20 * time.Second) // the second cool-off (20 s) ends
	g.judge(ctx, "p *", bp, resSlow)
	g.judge(ctx, "p *", bp, resSlow)
	if n := g.limit(ctx, "p *", bp); n != 2 {
		t.Errorf("after two throttling answers in one period: limit %d, want 2 (halved once)", n)
	}
	// Clean sends: nothing before adapt_window has passed, then one up
	// per window.
	for i := range 12 {
		now = now.Add(time.Second)
		g.judge(ctx, "p *", bp, resDelivered)
		want := int64(2)
		switch {
		case i >= 9:
			want = 4
		case i >= 4:
			want = 3
		}
		if n := g.limit(ctx, "p *", bp); n != want {
			t.Errorf("clean second %d: limit %d, want %d", i+1, n, want)
		}
	}
	// Raised to the configured limit, the learned one goes.
	k := g.key("p *")
	k.mu.Lock()
	k.learned = bp.limit - 1
	k.mu.Unlock()
	now = now.Add(bp.AdaptWindow)
	g.judge(ctx, "p *", bp, resDelivered)
	if _, ok, _ := g.marks.Get(ctx, "p *", markLimit); ok || g.limit(ctx, "p *", bp) != bp.limit {
		t.Errorf("at the configured limit the learned one stays: %d", g.limit(ctx, "p *", bp))
	}
}
