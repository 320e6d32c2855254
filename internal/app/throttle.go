package app

import (
	"context"
	"errors"
	"strings"
	"time"

	"sluice/internal/config"
	"sluice/internal/governor"
	"sluice/internal/throttle"
)

// throttleHandler adapts the throttle front end to the governor in force
// when each request arrives.
type throttleHandler struct{ d *Daemon }

func (h throttleHandler) Acquire(ctx context.Context, key string) (throttle.Grant, error) {
	g := h.d.gov.Load()
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
