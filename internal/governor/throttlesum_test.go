package governor

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"sluice/internal/clock"
	"sluice/internal/testutil/logbuf"
)

// TestThrottleSummary: one info line per period with the totals and the
// busiest keys first (grants/deferrals), the keys past the bound counted
// together, nothing for an idle period.
func TestThrottleSummary(t *testing.T) {
	buf := &logbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(buf, nil))
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	tl := NewThrottleTally(clock.NewFake(t0))
	for i := 0; i < 30; i++ {
		tl.Add("relay.example", true)
	}
	for i := 0; i < 5; i++ {
		tl.Add("relay.example", false)
	}
	tl.Add("mx.small.example", true)
	for i := 0; i < maxTallyKeys+2; i++ {
		tl.Add(fmt.Sprintf("host%05d.example", i), i%2 == 0)
	}
	tl.report(log, t0.Add(time.Minute))
	line := buf.String()
	for _, want := range []string{
		"level=INFO", "throttle summary", "period=1m0s",
		fmt.Sprintf("granted=%d", 31+(maxTallyKeys+2)/2), fmt.Sprintf("deferred=%d", 5+(maxTallyKeys+2)/2),
		fmt.Sprintf("keys=%d", maxTallyKeys), `top="relay.example 30/5, host00000.example 1/0,`,
		"other_keys_granted=2 other_keys_deferred=2",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("the summary lacks %q:\n%s", want, line)
		}
	}
	if n := strings.Count(line, "/"); n > tallyTop+2 {
		t.Errorf("the summary names %d keys, want at most %d:\n%s", n, tallyTop, line)
	}
	idle := &logbuf.Buffer{}
	tl.report(slog.New(slog.NewTextHandler(idle, nil)), t0.Add(2*time.Minute))
	if idle.String() != "" {
		t.Errorf("an idle period logged: %s", idle.String())
	}
	var nilTally *ThrottleTally
	nilTally.Add("x", true) // a daemon without the throttle door
}
