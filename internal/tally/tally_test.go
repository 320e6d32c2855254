package tally

import (
	"testing"
	"time"

	"sluice/internal/governor"
	"sluice/internal/limiter"
	"sluice/internal/metrics"

	"github.com/prometheus/client_golang/prometheus"
)

// Every verdict is counted once, by door and word; a refusal is listed
// among the recent ones and its key among the talkers; a deferral counts
// as refused and as deferred.
func TestTallyCountsOnce(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry(), metrics.PartDecisions)
	if err != nil {
		t.Fatal(err)
	}
	o := New(m)
	now := time.Now()
	lim := limiter.Limit{N: 2, Period: time.Minute}
	for _, v := range []governor.Verdict{
		{Door: "policy", Rule: "sender", Key: "a@example", Count: 1, Limit: lim, At: now},
		{Door: "policy", Rule: "sender", Key: "a@example", Count: 3, Limit: lim, Refused: true, Reply: "DEFER_IF_PERMIT busy", At: now},
		{Door: "throttle", Rule: "relay", Key: "relay x", Refused: true, Deferred: true, Reason: governor.ReasonBan, At: now},
	} {
		o.Observe(v)
	}
	tot := o.Totals()
	if tot.Decisions != 3 || tot.Refusals != 2 {
		t.Fatalf("totals %+v: want 3 decisions, 2 refusals", tot)
	}
	if tot.Doors["policy"]["ok"] != 1 || tot.Doors["policy"]["refused"] != 1 || tot.Doors["throttle"]["deferred"] != 1 {
		t.Fatalf("by door %v", tot.Doors)
	}
	talkers, refusals := o.Top(now, 10)
	if len(refusals) != 2 || refusals[0].Door != "throttle" || refusals[1].Key != "a@example" {
		t.Fatalf("recent refusals %+v: want the throttle's, then the policy's, newest first", refusals)
	}
	if len(talkers) == 0 || talkers[0].Key != "a@example" || talkers[0].Count != 3 {
		t.Fatalf("talkers %+v", talkers)
	}
	var nilTally *Tally
	if got := nilTally.Totals(); got.Decisions != 0 {
		t.Fatalf("a nil Tally counts %+v", got)
	}
}
