package ban

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"sluice/internal/clock"
	"sluice/internal/limiter"
	"sluice/internal/throttle"
)

// banGuardAt is a guard on in-memory marks, with its clock at *now.
func banGuardAt(t *testing.T, now *time.Time) *Guard {
	t.Helper()
	clk := ptrClock{now}
	marks, err := limiter.NewMemoryMarks("", clk)
	if err != nil {
		t.Fatal(err)
	}
	return NewGuard(marks, slog.New(slog.DiscardHandler), clk)
}

// ptrClock is a clock whose time is *now, set by the test.
type ptrClock struct{ now *time.Time }

func (c ptrClock) Now() time.Time                       { return *c.now }
func (c ptrClock) NewTimer(d time.Duration) clock.Timer { return clock.Real{}.NewTimer(d) }

// judge reads a trusted send's result lines for id as the throttle's
// handler does: the front end judges the lines by the policy's signs,
// the guard the key, the front end the sender's verdict.
func judge(ctx context.Context, g *Guard, id string, bp *Policy, lines []throttle.ResultLine) string {
	signs := throttle.NewSigns(bp.Signs)
	suspended := g.Judge(ctx, id, bp, Result(throttle.Judge(lines, signs)))
	return throttle.Verdict(lines, signs, suspended)
}

// untrusted is the verdict for a report from a peer not trusted to steer
// the key: its own lines as judge would rewrite them, nothing counted.
func untrusted(g *Guard, id string, bp *Policy, lines []throttle.ResultLine) string {
	return throttle.Verdict(lines, throttle.NewSigns(bp.Signs), g.SuspendedHere(id))
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
	bp := &Policy{CoolOff: time.Minute, MaxCoolOff: 3 * time.Minute, Signs: []string{"too many"}, Limit: 10, Period: time.Second}
	ctx := context.Background()
	for i, want := range []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute, 3 * time.Minute} {
		if v := judge(ctx, g, "p *", bp, resBanned); v != "T" {
			t.Fatalf("ban %d: verdict %q", i+1, v)
		}
		until, _ := g.admit(ctx, "p *")
		if got := until.Sub(now); got != want {
			t.Errorf("ban %d: suspended for %s, want %s", i+1, got, want)
		}
		// A second report of the same ban changes nothing.
		judge(ctx, g, "p *", bp, resBanned)
		if again, _ := g.admit(ctx, "p *"); !again.Equal(until) {
			t.Errorf("ban %d: a second report moved the suspension to %v", i+1, again)
		}
		now = until
		if u, _ := g.admit(ctx, "p *"); !u.IsZero() {
			t.Errorf("ban %d: still suspended at its end", i+1)
		}
	}
	now = now.Add(3*time.Minute + time.Second) // quiet for max_cool_off
	judge(ctx, g, "p *", bp, resBanned)
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
	bp := &Policy{After: 3, CoolOff: time.Minute, MaxCoolOff: time.Hour, Limit: 10, Period: time.Second}
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
		if v := judge(ctx, g, "p *", bp, s.res); v != s.verdict {
			t.Errorf("step %d: verdict %q, want %q", i+1, v, s.verdict)
		}
		if until, _ := g.admit(ctx, "p *"); !until.IsZero() != s.suspended {
			t.Errorf("step %d: suspended %v, want %v", i+1, !until.IsZero(), s.suspended)
		}
	}
}

// adapt: a ban halves the limit in force (never more: one event at most
// halves it); a ban right after a cool-off, with nothing delivered, says
// nothing of the rate; a throttling answer lowers at most once a period;
// each clean adapt_window after the suspension raises it by an eighth of
// the configured limit; at the configured limit the learned one is
// forgotten.
func TestBanAdapt(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	g := banGuardAt(t, &now)
	bp := &Policy{Adapt: true, CoolOff: 10 * time.Second, MaxCoolOff: time.Hour, AdaptWindow: 5 * time.Second, Signs: []string{"too many"}, Limit: 20, Period: time.Second}
	ctx := context.Background()
	for range 2 {
		now = now.Add(50 * time.Millisecond)
		judge(ctx, g, "p *", bp, resDelivered)
	}
	judge(ctx, g, "p *", bp, resBanned)
	if n := g.Limit(ctx, "p *", bp); n != 10 {
		t.Fatalf("after a ban with 2 delivered in the period: limit %d, want 10 (half of 20: one event lowers by half at most)", n)
	}
	now = now.Add(10 * time.Second) // the cool-off ends
	judge(ctx, g, "p *", bp, resBanned)
	if n := g.Limit(ctx, "p *", bp); n != 10 {
		t.Errorf("a ban right after the cool-off, nothing delivered: limit %d, want 10 (unchanged)", n)
	}
	now = now.Add(20 * time.Second) // the second cool-off (20 s) ends
	judge(ctx, g, "p *", bp, resSlow)
	judge(ctx, g, "p *", bp, resSlow)
	if n := g.Limit(ctx, "p *", bp); n != 5 {
		t.Errorf("after two throttling answers in one period: limit %d, want 5 (halved once)", n)
	}
	// Clean sends: nothing before adapt_window has passed, then up by
	// 3 (an eighth of 20, rounded up) per window.
	for i := range 12 {
		now = now.Add(time.Second)
		judge(ctx, g, "p *", bp, resDelivered)
		want := int64(5)
		switch {
		case i >= 9:
			want = 11
		case i >= 4:
			want = 8
		}
		if n := g.Limit(ctx, "p *", bp); n != want {
			t.Errorf("clean second %d: limit %d, want %d", i+1, n, want)
		}
	}
	// Raised to the configured limit, the learned one goes.
	k := g.key("p *")
	k.mu.Lock()
	k.learned = bp.Limit - 1
	k.mu.Unlock()
	now = now.Add(bp.AdaptWindow)
	judge(ctx, g, "p *", bp, resDelivered)
	if _, ok, _ := g.marks.Get(ctx, "p *", markLimit); ok || g.Limit(ctx, "p *", bp) != bp.Limit {
		t.Errorf("at the configured limit the learned one stays: %d", g.Limit(ctx, "p *", bp))
	}
}

// The way back is bounded: from a learned limit of 1, a configured 100
// is back after 8 windows of clean sending (raiseSteps), as
// docs/throttle.md says.
func TestBanAdaptRecoveryBound(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	g := banGuardAt(t, &now)
	bp := &Policy{Adapt: true, CoolOff: time.Second, MaxCoolOff: time.Hour, AdaptWindow: time.Minute, Signs: []string{"too many"}, Limit: 100, Period: time.Second}
	ctx := context.Background()
	if err := g.marks.Put(ctx, "p *", markLimit, limiter.Mark{Value: 1, Since: now, Expires: now.Add(learnedTTL)}); err != nil {
		t.Fatal(err)
	}
	windows := 0
	for g.Limit(ctx, "p *", bp) < bp.Limit {
		if windows > 10 {
			t.Fatalf("after %d clean windows the limit is %d, want 100 within 8", windows, g.Limit(ctx, "p *", bp))
		}
		now = now.Add(bp.AdaptWindow)
		judge(ctx, g, "p *", bp, resDelivered)
		windows++
	}
	if windows != raiseSteps {
		t.Errorf("back to the configured 100 after %d windows, want %d", windows, raiseSteps)
	}
}

// One send's sign of a ban decides nothing for the key: it is reported
// as temporary, but the key is suspended (and its limit halved) only when
// a second, distinct send shows one within the window; a sign older than
// the window does not count; signs from sends under way during a
// suspension are not counted toward the next.
func TestBanCorroboration(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	g := banGuardAt(t, &now)
	bp := &Policy{Adapt: true, CoolOff: time.Minute, MaxCoolOff: time.Hour, AdaptWindow: time.Hour, Corroborate: 2, CorroborateWindow: 10 * time.Second, Signs: []string{"too many"}, Limit: 100, Period: time.Second}
	ctx := context.Background()
	suspended := func() bool { u, _ := g.admit(ctx, "p *"); return !u.IsZero() }
	judge(ctx, g, "p *", bp, resDelivered)
	if v := judge(ctx, g, "p *", bp, resBanned); v != "T" || suspended() || g.Limit(ctx, "p *", bp) != 100 {
		t.Fatalf("one send's ban: verdict %q, suspended %v, limit %d; want T, not suspended, 100", v, suspended(), g.Limit(ctx, "p *", bp))
	}
	now = now.Add(11 * time.Second) // past the window: the first sign is gone
	if v := judge(ctx, g, "p *", bp, resBanned); v != "T" || suspended() {
		t.Fatalf("a second sign past the window: verdict %q, suspended %v; want T, not suspended", v, suspended())
	}
	now = now.Add(5 * time.Second)
	judge(ctx, g, "p *", bp, resDelivered) // the relay took one in the period
	if v := judge(ctx, g, "p *", bp, resBanned); v != "T" || !suspended() {
		t.Fatalf("a second sign within the window: verdict %q, suspended %v; want T, suspended", v, suspended())
	}
	if n := g.Limit(ctx, "p *", bp); n != 50 {
		t.Errorf("after the corroborated ban: limit %d, want 50", n)
	}
	judge(ctx, g, "p *", bp, resBanned) // a send under way during the ban
	now = now.Add(time.Minute)          // the cool-off ends
	if suspended() {
		t.Fatal("still suspended after the cool-off")
	}
	if judge(ctx, g, "p *", bp, resBanned); suspended() {
		t.Error("a sign during the suspension counted toward the next ban")
	}
	// Throttling answers lower the limit only when corroborated too.
	now = now.Add(time.Hour)
	judge(ctx, g, "p *", bp, resSlow)
	if n := g.Limit(ctx, "p *", bp); n != 50 {
		t.Errorf("one throttling answer: limit %d, want 50 (not corroborated)", n)
	}
	now = now.Add(time.Second)
	judge(ctx, g, "p *", bp, resSlow)
	if n := g.Limit(ctx, "p *", bp); n != 25 {
		t.Errorf("two throttling answers: limit %d, want 25", n)
	}
	// ban_after at least corroborate: its failures in a row are distinct
	// sends already.
	bp.After, bp.Adapt = 2, false
	now = now.Add(time.Hour)
	judge(ctx, g, "p *", bp, resRefused)
	if judge(ctx, g, "p *", bp, resRefused); !suspended() {
		t.Error("ban_after = 2 failures in a row did not suspend the key")
	}
}

// A report from a peer not trusted to steer the key gets its own verdict
// (its ban's failure made temporary) and changes nothing: no count, no
// sign, no suspension, no learned limit.
func TestBanUntrustedChangesNothing(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	g := banGuardAt(t, &now)
	bp := &Policy{Adapt: true, CoolOff: time.Minute, MaxCoolOff: time.Hour, AdaptWindow: time.Hour, Corroborate: 1, Signs: []string{"too many"}, Limit: 100, Period: time.Second}
	ctx := context.Background()
	for range 5 {
		if v := untrusted(g, "p *", bp, resBanned); v != "T" {
			t.Fatalf("an untrusted ban report: verdict %q, want T", v)
		}
		untrusted(g, "p *", bp, resSlow)
	}
	if u, _ := g.admit(ctx, "p *"); !u.IsZero() {
		t.Error("untrusted reports suspended the key")
	}
	if list, _ := g.marks.List(ctx); len(list) != 0 {
		t.Errorf("untrusted reports left marks: %+v", list)
	}
}

// reset forgets the learned limit and the ban streak (the next ban's
// cool-off is the first again); a suspension stays.
func TestBanReset(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	g := banGuardAt(t, &now)
	bp := &Policy{Adapt: true, CoolOff: time.Minute, MaxCoolOff: time.Hour, AdaptWindow: time.Hour, Corroborate: 1, Signs: []string{"too many"}, Limit: 100, Period: time.Second}
	ctx := context.Background()
	judge(ctx, g, "p *", bp, resDelivered)
	judge(ctx, g, "p *", bp, resBanned)
	now = now.Add(time.Minute)
	judge(ctx, g, "p *", bp, resDelivered)
	judge(ctx, g, "p *", bp, resBanned) // the second ban: 2 minutes
	if n := g.Limit(ctx, "p *", bp); n != 25 {
		t.Fatalf("after two bans: limit %d, want 25", n)
	}
	learned, bans, err := g.Reset(ctx, "p *")
	if err != nil || learned != 25 || bans != 2 {
		t.Fatalf("reset: %d %d %v, want 25 2", learned, bans, err)
	}
	if n := g.Limit(ctx, "p *", bp); n != 100 {
		t.Errorf("after reset: limit %d, want 100", n)
	}
	if u, _ := g.admit(ctx, "p *"); u.IsZero() {
		t.Error("reset ended the suspension (resume does that)")
	}
	if _, err := g.Resume(ctx, "p *"); err != nil {
		t.Fatal(err)
	}
	judge(ctx, g, "p *", bp, resBanned)
	if u, _ := g.admit(ctx, "p *"); u.Sub(now) != time.Minute {
		t.Errorf("the ban after a reset: suspended for %s, want the first cool-off (1m)", u.Sub(now))
	}
}

// downMarks are marks whose every call fails (Redis down).
type downMarks struct{ limiter.Marks }

func (downMarks) Get(context.Context, string, string) (limiter.Mark, bool, error) {
	return limiter.Mark{}, false, errors.New("down")
}
func (downMarks) Put(context.Context, string, string, limiter.Mark) error { return errors.New("down") }
func (downMarks) Add(context.Context, string, string, limiter.Mark) (bool, error) {
	return false, errors.New("down")
}
func (downMarks) Delete(context.Context, string, string) error { return errors.New("down") }

// With the marks down, this daemon's own signs corroborate a ban (its
// suspension is then this daemon's alone): one sign decides nothing, two
// within the window suspend, a sign past the window starts again.
func TestBanCorroborationMarksDown(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	g := banGuardAt(t, &now)
	g.marks = downMarks{g.marks}
	bp := &Policy{CoolOff: time.Minute, MaxCoolOff: time.Hour, Corroborate: 2, CorroborateWindow: 10 * time.Second, Signs: []string{"too many"}, Limit: 100, Period: time.Second}
	ctx := context.Background()
	suspended := func() bool {
		k := g.key("p *")
		k.mu.Lock()
		defer k.mu.Unlock()
		return now.Before(k.until)
	}
	if v := judge(ctx, g, "p *", bp, resBanned); v != "T" || suspended() {
		t.Fatalf("one sign, marks down: verdict %q, suspended %v", v, suspended())
	}
	now = now.Add(11 * time.Second)
	if judge(ctx, g, "p *", bp, resBanned); suspended() {
		t.Fatal("a second sign past the window suspended the key")
	}
	now = now.Add(time.Second)
	if judge(ctx, g, "p *", bp, resBanned); !suspended() {
		t.Fatal("two signs within the window, marks down: not suspended on this daemon")
	}
}
