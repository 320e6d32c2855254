package governor

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"sluice/internal/clock"
	"sluice/internal/limiter"
	"sluice/internal/testutil/logbuf"

	"sluice/internal/rules"
)

// TestPolicyFloodLogsBounded: 10,000 refused requests for one key within
// one window (10 per 60 s) write one INFO line at the first refusal and
// one summary when the window ends: at most 3 in all. Another key gets its
// own first line. At debug level each refusal is logged as well.
func TestPolicyFloodLogsBounded(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		t.Run(level.String(), func(t *testing.T) {
			f := policyFixture(t, PolicyRule{Name: "sender-rate", Count: rules.CountMessages, Key: []KeyPart{{Attr: "sender"}}, Limits: []limiter.Limit{lim("10/60s exact")}})
			var buf logbuf.Buffer
			log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level}))
			rl := NewRefusalLog(log, f.clk, 0)
			f.g.refusals, f.g.log = rl, log
			var ps PolicySession
			for i := range 10_010 {
				f.clk.Advance(time.Millisecond) // 10 s in all: one window
				q := PolicyRequest{ProtocolState: rules.StateEOM, Sender: "spam@example.net", Instance: fmt.Sprint(i), ClientAddress: "192.0.2.9"}
				f.check(t, &ps, &q)
			}
			rl.Flush() // inside the window: nothing due
			info := buf.Lines("level=INFO")
			if len(info) != 1 || !strings.Contains(info[0], "policy: over the limit") || !strings.Contains(info[0], "count=10") {
				t.Fatalf("within the window: %d INFO lines, want the first refusal with its count:\n%s", len(info), strings.Join(info, "\n"))
			}
			f.clk.Advance(time.Minute)
			rl.Flush()
			info = buf.Lines("level=INFO")
			if len(info) != 2 || !strings.Contains(info[1], "policy: 9999 more refused in the last 1m") || !strings.Contains(info[1], `key="sender=spam@example.net"`) {
				t.Fatalf("after the window: %d INFO lines, want a summary of 9999 more:\n%s", len(info), strings.Join(info, "\n"))
			}
			if n := len(buf.Lines("level=DEBUG")); level == slog.LevelDebug && n < 10_000 {
				t.Fatalf("debug: %d lines, want each refusal", n)
			}
			// The next window starts with a first line again; another key
			// has its own.
			for _, s := range []string{"spam@example.net", "other@example.net"} {
				for i := range 11 {
					q := PolicyRequest{ProtocolState: rules.StateEOM, Sender: s, Instance: fmt.Sprint("n", i), ClientAddress: "192.0.2.9"}
					f.check(t, &ps, &q)
				}
			}
			if info = buf.Lines("level=INFO"); len(info) != 4 {
				t.Fatalf("new window and new key: %d INFO lines, want 4:\n%s", len(info), strings.Join(info, "\n"))
			}
		})
	}
}

// TestRefusalLogLongWindowAndCap: a window longer than SummaryEvery gets
// a summary every SummaryEvery; keys beyond the cap are counted in one
// line.
func TestRefusalLogLongWindowAndCap(t *testing.T) {
	var buf logbuf.Buffer
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	rl := NewRefusalLog(slog.New(slog.NewTextHandler(&buf, nil)), clk, 2)
	ctx := t.Context()
	for range 300 { // 5 minutes, one a second, under a 1 h window
		rl.Refused(ctx, "policy", "r", "k", time.Hour, "policy: over the limit", "key", "k")
		clk.Advance(time.Second)
		rl.Flush()
	}
	info := buf.Lines("level=INFO")
	if len(info) != 1+5 || !strings.Contains(info[1], "policy: 59 more refused in the last 1m0s") || !strings.Contains(info[1], "key=k") {
		t.Fatalf("%d lines, want the first and 5 summaries, one a minute:\n%s", len(info), strings.Join(info, "\n"))
	}
	for _, k := range []string{"a", "b", "c", "d"} {
		rl.Refused(ctx, "policy", "r", k, time.Hour, "policy: over the limit", "key", k)
	}
	rl.Flush()
	info = buf.Lines("level=INFO")
	last := info[len(info)-1]
	if !strings.Contains(last, "3 more refusals of other keys not logged (over 2 keys refused at once)") {
		t.Fatalf("cap: %s", strings.Join(info, "\n"))
	}
}
