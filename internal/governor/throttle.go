package governor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"sluice/internal/hostmask"
	"sluice/internal/limiter"
)

// ThrottlePolicy paces outbound sends for the keys it matches: at most
// Limit (exact) sends per period, at most Concurrency at once, and nobody
// waits longer than MaxWait.
type ThrottlePolicy struct {
	Name string // for logs, metrics and the status page
	// Match selects keys (a destination host, relay or any string) by host
	// mask; an address key also matches networks.
	Match []hostmask.Mask
	// Limit is an exact limit; its Period is widened by Margin.
	Limit limiter.Limit
	// Concurrency caps sends in progress (0: no cap), like XLA's queue
	// threshold for outgoing sessions.
	Concurrency int64
	// MaxWait is the longest a sender waits before the answer is "defer".
	MaxWait time.Duration
	// Margin is added to the period to absorb the time between a grant and
	// the sender's first byte at the relay.
	Margin time.Duration
	// Shared makes every key the policy matches share one budget (all mail
	// through one smarthost); otherwise each key has its own.
	Shared bool
}

// ThrottleRules are the throttle policies, first match wins.
type ThrottleRules struct {
	Policies []ThrottlePolicy // in the configuration's order
}

// ErrDefer means the sender should not send now: its slot would come later
// than the policy's maximum wait.
var ErrDefer = errors.New("throttle: defer")

// ThrottleGrant is permission to send at At. Pass it to ThrottleDone when
// the send has ended (or was abandoned).
type ThrottleGrant struct {
	Policy string    // the policy's name
	Key    string    // the key the slot is for
	At     time.Time // when the sender may send
	// Latest is when the slot goes stale: a sender that wakes after it
	// (a stalled host) must not send late into the next slots' window,
	// and asks again. Half the policy's margin after At; zero without a
	// margin.
	Latest time.Time
	res    limiter.Reservation
	lease  limiter.Lease
	cap    int64
	// classLease is a session slot of the destination's class, held
	// against the class's queue cap (XLA's outgoing threshold).
	classLease limiter.Lease
	classCap   int64
	// classFull is set when the class's queue cap deferred the sender.
	classFull bool
}

// releaseClass ends a class session (incoming or outgoing). A send waiting
// for the class's queue cap gets the slot first, if the class is within
// that cap.
func (g *Governor) releaseClass(ctx context.Context, l limiter.Lease, queueCap int64) {
	g.waiters.Release(ctx, l, queueCap)
}

// throttleClass takes a session slot of key's class under its queue cap
// (the sessions of the class in both directions), waiting up to wait in
// line; with no cap it takes nothing.
func (g *Governor) throttleClass(ctx context.Context, key string, wait time.Duration) (limiter.Lease, int64, error) {
	cls := g.classes.Match(throttlePeer(key))
	if cls.Queue <= 0 {
		return limiter.Lease{}, 0, nil
	}
	timer := g.lim.Clock().NewTimer(wait)
	defer timer.Stop()
	lease, _, err := g.waiters.Acquire(ctx, cls.LeaseKey(), cls.Queue, "class sessions", timer.C())
	if errors.Is(err, limiter.ErrWaitExpired) {
		return lease, 0, fmt.Errorf("%w: class %s holds its queue cap of %d sessions (for %s)", ErrDefer, cls.Name, cls.Queue, wait)
	}
	if err != nil {
		return lease, 0, fmt.Errorf("class %s session for %s: %w", cls.Name, key, err)
	}
	return lease, cls.Queue, nil
}

func throttlePeer(key string) hostmask.Peer {
	if a, err := netip.ParseAddr(key); err == nil {
		return hostmask.PeerAddr("", a)
	}
	return hostmask.Peer{Name: key}
}

func (g *Governor) throttlePolicy(key string) *ThrottlePolicy {
	peer := throttlePeer(key)
	for i := range g.throttle.Policies {
		if anyMask(g.throttle.Policies[i].Match, peer) {
			return &g.throttle.Policies[i]
		}
	}
	return nil
}

// ThrottleTarget names the policy that paces key's sends and the budget
// they count against (the key, or "*" for a shared policy); ok is false
// when no policy matches. lim is the policy's configured limit.
func (g *Governor) ThrottleTarget(key string) (policy, bucket string, lim limiter.Limit, ok bool) {
	p := g.throttlePolicy(key)
	if p == nil {
		return "", "", limiter.Limit{}, false
	}
	bucket = key
	if p.Shared {
		bucket = "*"
	}
	return p.Name, bucket, p.Limit, true
}

type throttleCapKey struct{}

// WithThrottleCap returns a context under which ThrottleAcquire books
// with at most n sends per period (a learned limit below the configured
// one; n <= 0 or above it changes nothing).
func WithThrottleCap(ctx context.Context, n int64) context.Context {
	return context.WithValue(ctx, throttleCapKey{}, n)
}

// ThrottleAcquire waits, first come first served, for a concurrency slot
// of key's policy, then books the next send slot under its rate limit, and
// returns the time the slot is the caller's. Keys no policy matches may
// send at once. ErrDefer (wrapped, with the reason) means: do not send,
// try later. ctx ending gives up the place in line.
func (g *Governor) ThrottleAcquire(ctx context.Context, key string) (ThrottleGrant, error) {
	gr, err := g.throttleAcquire(ctx, key)
	v := Verdict{Door: "throttle", Rule: gr.Policy, Key: key}
	if p := g.throttlePolicy(key); p != nil {
		v.Limit = p.Limit
	}
	switch {
	case err == nil:
	case errors.Is(err, ErrDefer):
		why := strings.TrimPrefix(err.Error(), ErrDefer.Error()+": ")
		v.Refused, v.Deferred, v.Reason, v.Reply = true, true, ReasonMaxWait, "DEFER "+why
		if gr.classFull {
			v.Reason = ReasonClass
		}
		v.Msg, v.Window, v.Args = "throttle: deferred", SummaryEvery, []any{"key", key, "reason", why}
	case ctx.Err() != nil:
		return gr, err // the sender went away, or a suspension the caller records took its place
	default:
		// The store cannot book: the sender is told to try later.
		g.failMode(ctx, "throttle", key, true, "DEFER throttle unavailable: "+err.Error(), err)
		return gr, err
	}
	g.observe(ctx, v)
	return gr, err
}

func (g *Governor) throttleAcquire(ctx context.Context, key string) (ThrottleGrant, error) {
	now := g.lim.Now()
	p := g.throttlePolicy(key)
	if p == nil {
		// No rate policy: only the class's queue cap applies, and a full
		// class defers at once, as XLA queues the message.
		gr := ThrottleGrant{Key: key, At: now}
		var err error
		gr.classLease, gr.classCap, err = g.throttleClass(ctx, key, 0)
		gr.classFull = errors.Is(err, ErrDefer)
		return gr, err
	}
	gr := ThrottleGrant{Policy: p.Name, Key: key, cap: p.Concurrency}
	bucket := key
	if p.Shared {
		bucket = "*"
	}
	deadline := now.Add(p.MaxWait)
	if p.Concurrency > 0 {
		timer := g.lim.Clock().NewTimer(p.MaxWait)
		lease, _, err := g.waiters.Acquire(ctx, "throttle\x00c\x00"+p.Name+"\x00"+bucket, p.Concurrency, "throttle sessions", timer.C())
		timer.Stop()
		if errors.Is(err, limiter.ErrWaitExpired) {
			return gr, fmt.Errorf("%w: no free sending slot for %s within %s (policy %s allows %d at once)", ErrDefer, key, p.MaxWait, p.Name, p.Concurrency)
		}
		if err != nil {
			return gr, err
		}
		gr.lease = lease
	}
	cl, ccap, err := g.throttleClass(ctx, key, max(deadline.Sub(g.lim.Now()), 0))
	if err != nil {
		gr.classFull = errors.Is(err, ErrDefer)
		g.waiters.Release(context.WithoutCancel(ctx), gr.lease, gr.cap)
		return gr, err
	}
	gr.classLease, gr.classCap = cl, ccap
	lim := p.Limit
	lim.Period += p.Margin
	if n, _ := ctx.Value(throttleCapKey{}).(int64); n > 0 && n < lim.N {
		lim.N = n
	}
	left := deadline.Sub(g.lim.Now())
	res, err := g.lim.Reserve(ctx, "throttle\x00r\x00"+p.Name+"\x00"+bucket, lim, 1, max(left, 0))
	if err != nil {
		g.waiters.Release(context.WithoutCancel(ctx), gr.lease, gr.cap)
		g.releaseClass(context.WithoutCancel(ctx), gr.classLease, gr.classCap)
		if errors.Is(err, limiter.ErrTooLong) {
			return gr, fmt.Errorf("%w: next send slot for %s is in %s, beyond the %s maximum wait (policy %s: %s)",
				ErrDefer, key, res.At.Sub(g.lim.Now()).Round(time.Second), p.MaxWait, p.Name, p.Limit)
		}
		return gr, fmt.Errorf("book a send slot for %s: %w", key, err)
	}
	gr.res, gr.At = res, res.At
	if p.Margin > 0 {
		gr.Latest = res.At.Add(p.Margin / 2)
	}
	if g.log.Enabled(ctx, slog.LevelDebug) {
		g.log.Debug("throttle grant", "key", key, "policy", p.Name, "at", res.At.Format(time.RFC3339Nano), "wait", res.At.Sub(now).String())
	}
	return gr, nil
}

// ThrottleDone ends a grant: the concurrency slot goes to the next waiter.
// A slot the sender did not use (it gave up before its time) is given
// back; senders behind keep their times, so nobody jumps the line.
func (g *Governor) ThrottleDone(ctx context.Context, gr ThrottleGrant, used bool) {
	if !used && !gr.res.At.IsZero() && gr.res.At.After(g.lim.Now()) {
		if err := g.lim.Cancel(ctx, gr.res); err != nil {
			g.log.Warn("throttle: giving back a slot failed", "key", gr.Key, "err", err)
		}
	}
	g.waiters.Release(ctx, gr.lease, gr.cap)
	g.releaseClass(ctx, gr.classLease, gr.classCap)
}

// Table renders the policies as understood.
func (rs ThrottleRules) Table() string {
	var b strings.Builder
	for i, p := range rs.Policies {
		masks := make([]string, len(p.Match))
		for j, m := range p.Match {
			masks[j] = m.String()
		}
		conc := "no cap"
		if p.Concurrency > 0 {
			conc = fmt.Sprintf("at most %d at once", p.Concurrency)
		}
		per := "per key"
		if p.Shared {
			per = "shared by all its keys"
		}
		fmt.Fprintf(&b, "%d. %s: %s (+%s margin), %s, %s, defer after waiting %s; keys %s\n",
			i+1, p.Name, p.Limit, p.Margin, conc, per, p.MaxWait, strings.Join(masks, " "))
	}
	if len(rs.Policies) == 0 {
		b.WriteString("(no policies: every key sends at once)\n")
	}
	return b.String()
}
