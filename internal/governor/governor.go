// Package governor holds sluice's mail rules: which class a peer falls in,
// which keys and limits a mail event touches, and what each front end is
// told as a result. It calls the limiter and imports no protocol package.
package governor

import (
	"log/slog"

	"sluice/internal/limiter"
)

// Governor is one immutable set of rules over a shared limiter. A reload
// builds a new Governor over the same limiter, so counts survive it.
type Governor struct {
	lim      *limiter.Limiter
	classes  *limiter.Classes
	anvil    AnvilRules
	policy   PolicyRules
	throttle ThrottleRules
	milter   MilterRules
	obs      Observer
	waiters  *limiter.Waiters
	refusals *RefusalLog
	carried  *AnvilCarried
	exempt   *Exemptions
	pairs    *SessionPairs
	shares   *Shares
	capacity Capacity
	reserved int64 // the sum of the classes' reservations
	log      *slog.Logger
}

// Options configure a Governor.
type Options struct {
	Limiter  *limiter.Limiter // the counts, shared by every Governor of a daemon
	Classes  *limiter.Classes // the class table
	Anvil    AnvilRules       // the rules of each door
	Policy   PolicyRules
	Throttle ThrottleRules
	Milter   MilterRules
	// Observer, if set, receives every verdict (metrics, status page).
	Observer Observer
	// Waiters queues throttle senders; it must outlive reloads, so the
	// caller makes one per limiter (nil: a new one).
	Waiters *limiter.Waiters
	// Refusals bounds refusal log lines; it must outlive reloads (nil:
	// every refusal is logged).
	Refusals *RefusalLog
	// Carried holds the SMTP sessions the previous daemon handed over;
	// it must outlive reloads (nil: none).
	Carried *AnvilCarried
	// Exemptions are the administrator's exemptions; they must outlive
	// reloads (nil: none).
	Exemptions *Exemptions
	// Pairs links the anvil and milter doors' views of one SMTP session;
	// it must outlive reloads (nil: each door takes its own slot).
	Pairs *SessionPairs
	// Shares counts the sessions of each network for the fair shares; it
	// must outlive reloads (nil: a new one).
	Shares *Shares
	// Capacity is the MTA's session capacity the classes' reservations
	// divide (zero: unknown, reservations are not enforced).
	Capacity Capacity
	// Logger gets refusals and errors (default slog.Default()).
	Logger *slog.Logger
}

// New returns a Governor.
func New(o Options) *Governor {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Policy.Default == "" {
		o.Policy.Default = "DUNNO"
	}
	if o.Shares == nil {
		o.Shares = NewShares()
	}
	if o.Waiters == nil {
		o.Waiters = limiter.NewWaiters(o.Limiter)
	}
	return &Governor{lim: o.Limiter, classes: o.Classes, anvil: o.Anvil, policy: o.Policy,
		throttle: o.Throttle, milter: o.Milter, obs: o.Observer, waiters: o.Waiters, refusals: o.Refusals, carried: o.Carried, exempt: o.Exemptions, pairs: o.Pairs, shares: o.Shares, log: o.Logger,
		capacity: o.Capacity, reserved: o.Classes.Reserved()}
}

// Exemptions returns the administrator's exemptions (nil: none).
func (g *Governor) Exemptions() *Exemptions { return g.exempt }

// Limiter returns the limiter the governor counts in.
func (g *Governor) Limiter() *limiter.Limiter { return g.lim }

// Classes returns the class table.
func (g *Governor) Classes() *limiter.Classes { return g.classes }

// Policy returns the policy rules in force.
func (g *Governor) Policy() PolicyRules { return g.policy }

// Throttle returns the throttle policies in force.
func (g *Governor) Throttle() ThrottleRules { return g.throttle }

// AnvilRules returns the anvil rules in force. Only a test calls it:
// app's TestWatchReloads, to see which rules a reload put in force.
func (g *Governor) AnvilRules() AnvilRules { return g.anvil }
