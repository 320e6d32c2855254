package limiter_test

import (
	"bytes"
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
	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/wait"
)

func masks(ss ...string) []hostmask.Mask {
	var out []hostmask.Mask
	for _, s := range ss {
		out = append(out, hostmask.MustParse(s))
	}
	return out
}

func TestClassesFirstMatchWins(t *testing.T) {
	cs, err := limiter.NewClasses([]limiter.Class{
		{Name: "one", Masks: masks("grasp.insa-lyon.fr"), Refuse: 1, Queue: 1},
		{Name: "insa", Masks: masks("*.insa-lyon.fr", "192.0.2.0/24"), Refuse: 3, Queue: 8},
		{Name: "rest", Masks: masks("*"), Refuse: 16, Queue: 15},
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		p    hostmask.Peer
		want string
	}{
		{hostmask.Peer{Name: "grasp.insa-lyon.fr"}, "one"},
		{hostmask.Peer{Name: "x.insa-lyon.fr"}, "insa"},
		{hostmask.PeerAddr("unknown", netip.MustParseAddr("192.0.2.5")), "insa"},
		{hostmask.PeerAddr("", netip.MustParseAddr("198.51.100.1")), "rest"},
		{hostmask.Peer{}, "rest"},
	}
	for _, c := range cases {
		if got := cs.Match(c.p).Name; got != c.want {
			t.Errorf("Match(%+v) = %s, want %s", c.p, got, c.want)
		}
	}
	if tab := cs.Table(); !strings.Contains(tab, "insa                   3       8  *.insa-lyon.fr 192.0.2.0/24") {
		t.Errorf("table:\n%s", tab)
	}
}

func TestClassesErrors(t *testing.T) {
	cases := []struct {
		list []limiter.Class
		want string
	}{
		{nil, "needs at least the catch-all"},
		{[]limiter.Class{{Name: "a", Masks: masks("*.x.org")}}, "the last class (\"a\") must match \"*\""},
		{[]limiter.Class{{Name: "a", Masks: masks("*", "x.org")}}, "must match \"*\" and nothing else"},
		{[]limiter.Class{{Name: "a", Masks: masks("x.org")}, {Name: "a", Masks: masks("*")}}, "defined twice"},
		{[]limiter.Class{{Name: "", Masks: masks("*")}}, "has no name"},
		{[]limiter.Class{{Name: "a"}, {Name: "b", Masks: masks("*")}}, "has no masks"},
		{[]limiter.Class{{Name: "b", Masks: masks("*"), Refuse: -1}}, "must not be negative"},
	}
	for _, c := range cases {
		if _, err := limiter.NewClasses(c.list); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewClasses(%v) = %v, want %q", c.list, err, c.want)
		}
	}
}

func TestClassCapsXLA(t *testing.T) {
	// XLA: incoming admitted while count < refuse, outgoing while count <
	// queue, both counted together.
	s := memory.New(memory.Options{})
	defer s.Close()
	l := limiter.New(limiter.Options{Store: s, Clock: clock.NewFake(storetest.T0)})
	c := limiter.Class{Name: "c", Refuse: 2, Queue: 3}
	ctx := context.Background()
	acq := func(dir limiter.Direction) bool {
		_, _, ok, err := l.Acquire(ctx, c.LeaseKey(), c.Cap(dir), 0, "class sessions")
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	got := []bool{acq(limiter.Incoming), acq(limiter.Incoming), acq(limiter.Incoming), acq(limiter.Outgoing), acq(limiter.Outgoing)}
	want := []bool{true, true, false, true, false}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("admissions %v, want %v", got, want)
		}
	}
}

type failingStore struct{ limiter.Store }

func (failingStore) Hit(context.Context, time.Time, int64, limiter.Mode, []limiter.Check, []limiter.Decision) error {
	return limiter.ErrFull
}
func (failingStore) Len() int { return 0 }

func TestFailMode(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	checks := []limiter.Check{{Key: "k", Limit: limiter.Limit{Algorithm: limiter.Exact, N: 1, Period: time.Second}}}
	for _, open := range []bool{true, false} {
		l := limiter.New(limiter.Options{Store: failingStore{}, FailOpen: open, Logger: log})
		out := make([]limiter.Decision, 1)
		err := l.Hit(context.Background(), 1, limiter.Leaky, checks, out)
		if !errors.Is(err, limiter.ErrFull) || out[0].Allowed != open {
			t.Errorf("failOpen=%v: err %v decision %+v", open, err, out[0])
		}
	}
	if !strings.Contains(buf.String(), "admitting per the fail mode") || !strings.Contains(buf.String(), "refusing per the fail mode") {
		t.Errorf("log:\n%s", buf.String())
	}
}

func TestPeaksReport(t *testing.T) {
	var buf logbuf.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	s := memory.New(memory.Options{})
	defer s.Close()
	fc := clock.NewFake(storetest.T0)
	l := limiter.New(limiter.Options{Store: s, Clock: fc, Logger: log, KeyText: func(k string) string { return strings.TrimPrefix(k, "anvil\x00") }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.RunStatus(ctx, 10*time.Minute); close(done) }()
	lim := limiter.Limit{Algorithm: limiter.Anvil, N: limiter.Unlimited, Period: time.Minute}
	out := make([]limiter.Decision, 1)
	for i := range 5 {
		key := "anvil\x00smtp:192.0.2.1" // the report shows it as KeyText renders it
		if i == 4 {
			key = "anvil\x00smtp:192.0.2.2"
		}
		if err := l.Hit(ctx, 1, limiter.Leaky, []limiter.Check{{Key: key, Limit: lim, Stat: "connection rate"}}, out); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(t, func() bool { return fc.Timers() > 0 }, "the status loop's timer")
	fc.Advance(10 * time.Minute)
	wait.For(t, func() bool { return strings.Contains(buf.String(), "table size") }, "the statistics lines")
	cancel()
	<-done
	got := buf.String()
	for _, want := range []string{`msg="statistics: max connection rate" value=4 per=1m0s key=smtp:192.0.2.1 at="Nov 21 12:00:00"`, `msg="statistics: max table size" value=2`} {
		if !strings.Contains(got, want) {
			t.Errorf("log lacks %q:\n%s", want, got)
		}
	}
	if len(l.Peaks().Snapshot()) != 0 {
		t.Errorf("peaks not reset after report")
	}
}

// leaseKeySink makes LeaseKey's result escape, as a store key does.
var leaseKeySink string

// TestLeaseKeyMadeOnce: a table's class keeps its key (made by
// NewClasses, no allocation a session), the same key a Class made
// otherwise computes.
func TestLeaseKeyMadeOnce(t *testing.T) {
	cs, err := limiter.NewClasses([]limiter.Class{{Name: "mx", Masks: masks("192.0.2.0/24")}, {Name: "rest", Masks: masks("*")}})
	if err != nil {
		t.Fatal(err)
	}
	c := cs.Match(hostmask.PeerAddr("", netip.MustParseAddr("192.0.2.7")))
	lit := limiter.Class{Name: "mx"}
	if got, want := c.LeaseKey(), lit.LeaseKey(); got != want || got != "class\x00mx" {
		t.Fatalf("LeaseKey = %q, a literal's %q", got, want)
	}
	if n := testing.AllocsPerRun(100, func() { leaseKeySink = c.LeaseKey() }); n != 0 {
		t.Errorf("a table class's LeaseKey allocates %v times", n)
	}
}
