package app

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

// Bounds of what the observer keeps for the status page.
const (
	maxTalkers  = 2048 // keys tracked for the top-talker list
	maxRefusals = 64   // recent refusals kept
	talkerIdle  = 10 * time.Minute
)

// observer receives every verdict of the governor: it counts them in the
// metrics and keeps the top talkers and the recent refusals for the status
// page. Its memory is bounded whatever the traffic.
type observer struct {
	m         *metrics.Metrics
	decisions atomic.Uint64
	refusals  atomic.Uint64

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

func newObserver(m *metrics.Metrics) *observer {
	return &observer{m: m, talkers: map[talkerKey]*talker{}}
}

// Observe implements governor.Observer.
func (o *observer) Observe(v *governor.Verdict) {
	verdict := "ok"
	switch {
	case v.Refused && v.DryRun:
		verdict = "dry_run"
	case v.Refused && v.Door == "throttle":
		verdict = "deferred" // told not to send now: the mail waits in the queue
	case v.Refused:
		verdict = "refused"
	}
	o.m.Decision(v.Door, v.Rule, verdict)
	o.decisions.Add(1)
	if v.Refused && !v.DryRun {
		o.refusals.Add(1)
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
			Verdict: verdictWord(v.Reply), Reply: v.Reply}
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
func (o *observer) evict(now time.Time) {
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

// totals returns the running counts (zero without an observer).
func (o *observer) totals() status.Totals {
	if o == nil {
		return status.Totals{}
	}
	return status.Totals{Decisions: o.decisions.Load(), Refusals: o.refusals.Load()}
}

// top returns the busiest talkers against their limits, and the recent
// refusals, newest first.
// relimit brings the talkers' limits up to date after a reload, so that
// the status page shows a raised limit at once, not when the key is next
// counted: a talker keeps its count and takes the new N of its rule's
// limit with the same algorithm and period (the same window, so the same
// count); a talker whose rule or limit is gone, or that a table now
// exempts, is dropped.
func (o *observer) relimit(g *governor.Governor) {
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

func (o *observer) top(now time.Time, n int) ([]status.Talker, []status.Refusal) {
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
