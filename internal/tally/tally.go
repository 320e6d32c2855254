// Package tally is what sluice keeps of its verdicts for people: every
// verdict the governor records (governor.Record) is counted here once, in
// the Prometheus metrics and in the status's totals, and the top talkers
// and the most recent refusals are kept, within fixed bounds, for the
// status page and /status.json.
package tally

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"sluice/internal/governor"
	"sluice/internal/limiter"
	"sluice/internal/metrics"
	"sluice/internal/status"
)

// Bounds of what a Tally keeps for the status page.
const (
	maxTalkers  = 2048 // keys tracked for the top-talker list
	maxRefusals = 64   // recent refusals kept
	talkerIdle  = 10 * time.Minute
)

// Tally receives every verdict of the governor (a governor.Observer): it
// counts them in the metrics and keeps the top talkers and the recent
// refusals for the status page. Its memory is bounded whatever the
// traffic.
type Tally struct {
	m         *metrics.Metrics
	decisions atomic.Uint64
	refusals  atomic.Uint64
	// byDoor counts verdicts by door and word (the metric's labels less
	// the rule), for the status's totals.
	byDoor [len(VerdictDoors)][len(VerdictWords)]atomic.Uint64

	mu      sync.Mutex
	talkers map[talkerKey]*talker
	recent  []status.Refusal // ring of the newest refusals
	next    int
}

type talkerKey struct{ door, rule, key string }

type talker struct {
	count int64
	limit limiter.Limit
	last  time.Time
}

// New returns a Tally counting into m.
func New(m *metrics.Metrics) *Tally {
	return &Tally{m: m, talkers: map[talkerKey]*talker{}}
}

// VerdictDoors and VerdictWords are the doors and verdict words the
// status's totals count.
var (
	VerdictDoors = [...]string{"anvil", "policy", "milter", "throttle"}
	VerdictWords = [...]string{"ok", "refused", "deferred", "dry_run"}
)

// Observe implements governor.Observer: every verdict is counted here
// once, in the metrics and the status's totals alike.
func (o *Tally) Observe(v governor.Verdict) {
	word := v.Word()
	o.m.Decision(v.Door, v.Rule, word)
	o.decisions.Add(1)
	if v.Refused && !v.DryRun {
		o.refusals.Add(1)
	}
	if d, w := slices.Index(VerdictDoors[:], v.Door), slices.Index(VerdictWords[:], word); d >= 0 && w >= 0 {
		o.byDoor[d][w].Add(1)
	}
	// Talkers are keys under a rate; session caps (Period 0) are shown
	// with the classes.
	rate := v.Limit.N > 0 && v.Limit.Period > 0
	if !rate && !v.Refused {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if rate {
		k := talkerKey{v.Door, v.Rule, v.Key}
		t := o.talkers[k]
		if t == nil {
			if len(o.talkers) >= maxTalkers {
				o.evict(v.At)
			}
			t = &talker{}
			o.talkers[k] = t
		}
		t.count, t.limit, t.last = v.Count, v.Limit, v.At
	}
	if v.Refused {
		d := status.Refusal{At: v.At, Door: v.Door, Rule: v.Rule, Key: v.Key, Count: v.Count, Limit: v.Limit.N,
			Verdict: verdictWord(v.Reply), Reply: v.Reply, Reason: v.Reason}
		if v.Limit.Period > 0 {
			d.Period = limiter.FormatPeriod(v.Limit.Period)
			d.Algorithm = v.Limit.Algorithm.String()
		} else {
			d.Algorithm = "concurrency"
		}
		if v.DryRun {
			d.Verdict = "WARN"
		}
		if len(o.recent) < maxRefusals {
			o.recent = append(o.recent, d)
		} else {
			o.recent[o.next] = d
		}
		o.next = (o.next + 1) % maxRefusals
	}
}

// evict drops talkers idle for long, or else the least busy half; o.mu
// is held. Amortised: it runs once per maxTalkers/2 new keys at most.
func (o *Tally) evict(now time.Time) {
	for k, t := range o.talkers {
		if now.Sub(t.last) > talkerIdle {
			delete(o.talkers, k)
		}
	}
	if len(o.talkers) < maxTalkers {
		return
	}
	type kv struct {
		k talkerKey
		r float64
	}
	all := make([]kv, 0, len(o.talkers))
	for k, t := range o.talkers {
		all = append(all, kv{k, ratio(t)})
	}
	slices.SortFunc(all, func(a, b kv) int {
		switch {
		case a.r < b.r:
			return -1
		case a.r > b.r:
			return 1
		}
		return 0
	})
	for _, e := range all[:len(all)/2] {
		delete(o.talkers, e.k)
	}
}

func ratio(t *talker) float64 {
	if t.limit.N <= 0 {
		return 0
	}
	return float64(t.count) / float64(t.limit.N)
}

// verdictWord is the first word of a reply: "DEFER_IF_PERMIT", "421".
func verdictWord(reply string) string {
	for i := range len(reply) {
		if reply[i] == ' ' {
			return reply[:i]
		}
	}
	if reply == "" {
		return "DEFER"
	}
	return reply
}

// Totals returns the running counts (zero without an observer).
func (o *Tally) Totals() status.Totals {
	if o == nil {
		return status.Totals{}
	}
	t := status.Totals{Decisions: o.decisions.Load(), Refusals: o.refusals.Load()}
	for d, door := range VerdictDoors {
		for w, word := range VerdictWords {
			if n := o.byDoor[d][w].Load(); n > 0 {
				if t.Doors == nil {
					t.Doors = map[string]map[string]uint64{}
				}
				if t.Doors[door] == nil {
					t.Doors[door] = map[string]uint64{}
				}
				t.Doors[door][word] = n
			}
		}
	}
	return t
}

// Top returns the busiest talkers against their limits, and the recent
// refusals, newest first.
// Relimit brings the talkers' limits up to date after a reload, so that
// the status page shows a raised limit at once, not when the key is next
// counted: a talker keeps its count and takes the new N of its rule's
// limit with the same algorithm and period (the same window, so the same
// count); a talker whose rule or limit is gone, or that a table now
// exempts, is dropped.
func (o *Tally) Relimit(g *governor.Governor) {
	if o == nil {
		return
	}
	throttle := map[string][]limiter.Limit{}
	for _, p := range g.Throttle().Policies {
		throttle[p.Name] = []limiter.Limit{p.Limit}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, t := range o.talkers {
		var limits []limiter.Limit
		if k.door == "throttle" {
			limits = throttle[k.rule]
		} else {
			limits, _ = g.RuleKeyLimits(k.rule, k.key) // a per-key table's, if it has an entry
		}
		i := slices.IndexFunc(limits, func(l limiter.Limit) bool {
			return l.Algorithm == t.limit.Algorithm && l.Period == t.limit.Period
		})
		if i < 0 {
			delete(o.talkers, k)
			continue
		}
		t.limit = limits[i]
	}
}

// Top returns the n busiest talkers nearest their limits and the recent
// refusals, newest first, as of now.
func (o *Tally) Top(now time.Time, n int) ([]status.Talker, []status.Refusal) {
	if o == nil {
		return nil, nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var ts []status.Talker
	type scored struct {
		t status.Talker
		r float64
	}
	var all []scored
	for k, t := range o.talkers {
		if now.Sub(t.last) > t.limit.Period+time.Minute || t.count <= 0 {
			continue // its window has passed: no longer talking
		}
		st := status.Talker{Rule: k.rule, Key: k.key, Count: t.count, Limit: t.limit.N}
		if t.limit.Period > 0 {
			st.Period = limiter.FormatPeriod(t.limit.Period)
			st.Rate = float64(t.count) / t.limit.Period.Seconds()
		}
		all = append(all, scored{st, ratio(t)})
	}
	slices.SortFunc(all, func(a, b scored) int {
		switch {
		case a.r > b.r:
			return -1
		case a.r < b.r:
			return 1
		}
		return 0
	})
	for i := 0; i < len(all) && i < n; i++ {
		ts = append(ts, all[i].t)
	}
	ds := make([]status.Refusal, 0, len(o.recent))
	for i := range o.recent {
		j := (o.next - 1 - i + 2*maxRefusals) % maxRefusals
		if len(o.recent) < maxRefusals {
			j = len(o.recent) - 1 - i
		}
		ds = append(ds, o.recent[j])
	}
	return ts, ds
}
