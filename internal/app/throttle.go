package app

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"time"

	"sluice/internal/config"
	"sluice/internal/governor"
	"sluice/internal/limiter"
	"sluice/internal/metrics"
	"sluice/internal/store/redis"
	"sluice/internal/throttle"
)

// throttleHandler adapts the throttle front end to the governor in force
// when each request arrives, and to the ban guard (nil: no policy reads
// results).
type throttleHandler struct{ d *Daemon }

// Acquire asks for key's next send slot and counts the answer for the
// throttle summary.
func (h throttleHandler) Acquire(ctx context.Context, key string) (throttle.Grant, error) {
	gr, err := h.acquireSlot(ctx, key)
	var de *throttle.DeferError
	if err == nil {
		h.d.throttleTally.add(key, true)
	} else if errors.As(err, &de) {
		h.d.throttleTally.add(key, false)
	}
	return gr, err
}

func (h throttleHandler) acquireSlot(ctx context.Context, key string) (throttle.Grant, error) {
	g := h.d.gov.Load()
	ban := h.d.throttleBan
	var bp *banPolicy
	var id string
	if ban != nil {
		if name, bucket, _, ok := g.ThrottleTarget(key); ok {
			bp, id = ban.policy(h.d.cfg.Load(), name), name+" "+bucket
		}
	}
	if id == "" {
		return h.acquire(ctx, g, key)
	}
	// Every key a policy paces may be suspended: by a ban, or by an
	// administrator (sluice throttle suspend). A policy without ban
	// settings needs the guard only for a key the snapshot of suspended
	// keys holds.
	if _, ok := ban.suspendedSet().lookup(id, ban.now()); bp == nil && !ok {
		return h.acquireUnlessSuspended(ctx, g, ban, key, id)
	}
	if until, why := ban.admit(ctx, id); !until.IsZero() {
		return throttle.Grant{}, h.deferSuspended(ctx, g, key, suspendedText(id, until, why))
	}
	suspended, stop := ban.watch(id)
	wctx := ctx
	if bp != nil {
		wctx = governor.WithThrottleCap(ctx, ban.limit(ctx, id, bp))
	}
	wctx, cancel := context.WithCancel(wctx)
	go func() {
		select {
		case <-suspended:
			cancel()
		case <-wctx.Done():
		}
	}()
	gr, err := h.acquire(wctx, g, key)
	cancel()
	if err != nil {
		stop()
		if ctx.Err() == nil && isClosed(suspended) {
			return throttle.Grant{}, h.deferSuspended(ctx, g, key, ban.revokeReason(id))
		}
		return gr, err
	}
	if isClosed(suspended) {
		// Suspended while this sender was handed its slot (a slot freed
		// at the ban went to it before the cancel above): it must not send.
		gr.Done(false)
		stop()
		return throttle.Grant{}, h.deferSuspended(ctx, g, key, ban.revokeReason(id))
	}
	done := gr.Done
	gr.Done = func(used bool) { stop(); done(used) }
	gr.Revoked = suspended
	gr.RevokeReason = func() string { return ban.revokeReason(id) }
	if bp != nil {
		gr.Judge = func(ctx context.Context, lines []throttle.ResultLine, from throttle.Reporter) string {
			// The policy in force when the result comes (a reload between
			// grant and result applies its signs).
			if p := ban.policy(h.d.cfg.Load(), bp.name); p != nil {
				bp = p
			}
			if !from.Trusted {
				answer := ban.untrusted(id, bp, lines)
				h.recordUntrusted(ctx, id, from.Peer, answer)
				return answer
			}
			return ban.judge(ctx, id, bp, lines)
		}
	}
	return gr, nil
}

// acquireUnlessSuspended acquires key's slot for a policy without ban
// settings: no marks call, no goroutine of its own; a suspension of id
// this daemon learns of while the sender waits (or is handed its slot)
// defers it.
func (h throttleHandler) acquireUnlessSuspended(ctx context.Context, g *governor.Governor, ban *banGuard, key, id string) (throttle.Grant, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := ban.onSuspend(id, cancel)
	gr, err := h.acquire(wctx, g, key)
	stop()
	x, suspended := ban.suspendedSet().lookup(id, ban.now())
	switch {
	case suspended:
		if err == nil {
			gr.Done(false)
		}
		return throttle.Grant{}, h.deferSuspended(ctx, g, key, suspendedText(id, x.until, x.reason))
	case err != nil && ctx.Err() == nil && wctx.Err() != nil:
		return throttle.Grant{}, h.deferSuspended(ctx, g, key, id+" was suspended while waiting")
	}
	return gr, err
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
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
func (d *Daemon) openBanGuard() *banGuard {
	g := d.newBanGuard()
	if err := g.refreshSuspended(d.stop); err != nil {
		d.log.Warn("throttle: the suspensions cannot be read; keys without ban settings are not held back until they are", "err", err)
	}
	d.metrics.ThrottleKeys(func(ctx context.Context) ([]metrics.ThrottleKey, error) {
		keys, err := g.states(ctx, d.cfg.Load())
		out := make([]metrics.ThrottleKey, len(keys))
		for i, k := range keys {
			out[i] = metrics.ThrottleKey{Key: k.Key, SuspendedUntil: k.SuspendedUntil, Bans: k.Bans, Limit: k.Limit}
		}
		return out, err
	})
	return g
}

func (d *Daemon) newBanGuard() *banGuard { return newBanGuard(d.marks, d.log) }

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
		d.state.lost(path, "suspensions, learned limits and exemptions were not restored and are not kept: "+err.Error())
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

// logThrottleDefer is the throttle server's hook for a deferral's log
// line: none, as every deferral is recorded (logged, counted) where it is
// decided (governor.Record).
func (d *Daemon) logThrottleDefer(context.Context, string, string) {}
