package app

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"time"

	"sluice/internal/ban"
	"sluice/internal/clock"
	"sluice/internal/config"
	"sluice/internal/governor"
	"sluice/internal/limiter"
	"sluice/internal/metrics"
	"sluice/internal/rules"
	"sluice/internal/store/redis"
	"sluice/internal/throttle"
)

// throttleHandler adapts the throttle front end to the governor in force
// when each request arrives, and to the ban guard (ban.Guard; nil: no
// throttle door).
type throttleHandler struct{ d *Daemon }

// Acquire asks for key's next send slot and counts the answer for the
// throttle summary.
func (h throttleHandler) Acquire(ctx context.Context, key string) (throttle.Grant, error) {
	gr, err := h.acquireSlot(ctx, key)
	var de *throttle.DeferError
	if err == nil {
		h.d.throttleTally.Add(key, true)
	} else if errors.As(err, &de) {
		h.d.throttleTally.Add(key, false)
	}
	return gr, err
}

// acquireSlot waits for key's slot under the ban guard: every key a
// policy paces may be suspended, by a ban or by an administrator (sluice
// throttle suspend); the guard decides (ban.Guard.Admit, ban.Wait.Got).
func (h throttleHandler) acquireSlot(ctx context.Context, key string) (throttle.Grant, error) {
	g, guard := h.d.gov.Load(), h.d.throttleBan
	if guard == nil {
		return h.acquire(ctx, g, key)
	}
	name, bucket, _, ok := g.ThrottleTarget(key)
	if !ok {
		return h.acquire(ctx, g, key)
	}
	id, bp := name+" "+bucket, guard.Policy(name)
	w, err := guard.Admit(ctx, id, bp)
	if err != nil {
		return throttle.Grant{}, deferred(err)
	}
	wctx := w.Context()
	if bp != nil {
		wctx = governor.WithThrottleCap(wctx, w.Limit(ctx))
	}
	gr, err := h.acquire(wctx, g, key)
	if err := w.Got(ctx, err, func() { gr.Done(false) }); err != nil {
		return throttle.Grant{}, deferred(err)
	}
	if w.Revoked() == nil {
		return gr, nil
	}
	done := gr.Done
	gr.Done = func(used bool) { w.Done(); done(used) }
	gr.Revoked, gr.RevokeReason = w.Revoked(), w.RevokeReason
	if bp != nil {
		gr.Judge = func(ctx context.Context, lines []throttle.ResultLine, from throttle.Reporter) string {
			return h.judge(ctx, guard, id, bp, lines, from)
		}
	}
	return gr, nil
}

// judge reads a send's result for the guard and returns the sender's
// verdict: only a trusted peer's report steers the key.
func (h throttleHandler) judge(ctx context.Context, guard *ban.Guard, id string, bp *ban.Policy, lines []throttle.ResultLine, from throttle.Reporter) string {
	// The policy in force when the result comes (a reload between grant
	// and result applies its signs).
	if p := guard.Policy(bp.Name); p != nil {
		bp = p
	}
	signs := throttle.NewSigns(bp.Signs)
	if !from.Trusted {
		h.d.refusals.Refused(ctx, "throttle", "report", id, time.Minute,
			"throttle: a report from a peer not trusted to steer the key changed nothing", "key", id, "peer", from.Peer)
		return throttle.Verdict(lines, signs, guard.SuspendedHere(id))
	}
	suspended := guard.Judge(ctx, id, bp, ban.Result(throttle.Judge(lines, signs)))
	return throttle.Verdict(lines, signs, suspended)
}

// deferred is the throttle's answer for the guard's error: a deferral
// as the front end's, anything else as it is.
func deferred(err error) error {
	var bd *ban.Deferral
	if errors.As(err, &bd) {
		return &throttle.DeferError{Reason: bd.Error()}
	}
	return err
}

func (h throttleHandler) acquire(ctx context.Context, g *governor.Governor, key string) (throttle.Grant, error) {
	h.d.metrics.ThrottleWaiters(int(h.d.throttleWaiting.Add(1)))
	start := time.Now()
	gr, err := g.ThrottleAcquire(ctx, key)
	h.d.metrics.ThrottleWaiters(int(h.d.throttleWaiting.Add(-1)))
	if err == nil {
		// The wait a sender is given: until its slot, from its request.
		h.d.metrics.ThrottleGrant(gr.At.Sub(start))
	}
	if err != nil {
		if errors.Is(err, governor.ErrDefer) {
			return throttle.Grant{}, &throttle.DeferError{Reason: strings.TrimPrefix(err.Error(), governor.ErrDefer.Error()+": ")}
		}
		return throttle.Grant{}, err
	}
	return throttle.Grant{At: gr.At, Latest: gr.Latest, Done: func(used bool) { g.ThrottleDone(context.Background(), gr, used) }}, nil
}

// openBanGuard returns the guard of the throttle's ban handling, its
// marks in Redis (shared by every daemon on it) with a Redis store, else
// in the state directory's throttle.marks.
func (d *Daemon) openBanGuard() *ban.Guard {
	g := ban.NewGuard(d.marks, d.log, clock.Real{})
	g.Configure(banSettings(d.cfg.Load()))
	if err := g.RefreshSuspended(d.stop); err != nil {
		d.log.Warn("throttle: the suspensions cannot be read; keys without ban settings are not held back until they are", "err", err)
	}
	d.metrics.ThrottleKeys(func(ctx context.Context) ([]metrics.ThrottleKey, error) {
		keys, err := g.States(ctx)
		out := make([]metrics.ThrottleKey, len(keys))
		for i, k := range keys {
			out[i] = metrics.ThrottleKey{Key: k.Key, SuspendedUntil: k.SuspendedUntil, Bans: k.Bans, Limit: k.Limit}
		}
		return out, err
	})
	return g
}

// banSettings converts the ban settings of cfg's throttle policies for
// the guard.
func banSettings(cfg *config.Config) ban.Settings {
	specs, _ := cfg.ThrottlePolicies()
	s := ban.Settings{MaxCorroborate: config.MaxCorroborate}
	for _, p := range specs {
		if b := p.Ban; b.On() {
			s.Policies = append(s.Policies, ban.Policy{Name: p.Name, Signs: b.Signs, After: b.After, CoolOff: b.CoolOff, MaxCoolOff: b.MaxCoolOff,
				Adapt: b.Adapt, AdaptWindow: b.AdaptWindow, Corroborate: b.Corroborate, CorroborateWindow: b.CorroborateWindow,
				Limit: p.Limit.N, Period: p.Limit.Period + p.Margin, Shown: rules.FormatPeriod(p.Limit.Period)})
		}
	}
	return s
}

// openMarks opens the daemon's per-key marks (throttle suspensions, ban
// streaks, learned limits, exemptions): in Redis, shared by every daemon
// on it, with a Redis store, else in the state directory's
// throttle.marks.
func (d *Daemon) openMarks() limiter.Marks {
	st := d.store
	if is, ok := st.(instrumentedStore); ok {
		st = is.Store
	}
	if rs, ok := st.(*redis.Store); ok {
		if m := rs.Marks(); m != nil {
			return m
		}
	}
	path := filepath.Join(d.cfg.Load().StateDir, "throttle.marks")
	m, err := limiter.NewMemoryMarks(path, nil)
	if err != nil {
		d.log.Error("the marks file cannot be read; suspensions, learned limits and exemptions start afresh and are not kept", "err", err)
		m, _ = limiter.NewMemoryMarks("", nil)
	}
	return m
}

// ThrottleRules converts the configured throttle policies for the governor.
func ThrottleRules(cfg *config.Config) (governor.ThrottleRules, []error) {
	specs, errs := cfg.ThrottlePolicies()
	var rules governor.ThrottleRules
	for _, s := range specs {
		rules.Policies = append(rules.Policies, governor.ThrottlePolicy{
			Name: s.Name, Match: s.Match, Limit: s.Limit, Concurrency: s.Concurrency,
			MaxWait: s.MaxWait, Margin: s.Margin, Shared: s.Shared,
		})
	}
	return rules, errs
}

// logThrottleDefer logs a deferred sender through the refusal log: one
// line per key and minute, then a count.
func (d *Daemon) logThrottleDefer(ctx context.Context, key, reason string) {
	d.refusals.Refused(ctx, "throttle", "defer", key, governor.SummaryEvery, "throttle: deferred", "key", key, "reason", reason)
}
