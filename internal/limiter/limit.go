// Package limiter holds sluice's counting algorithms (anvil windows, exact
// sliding logs, smooth GCRA), concurrency leases and reservations, and the
// Store interface every backend implements. It decides nothing about mail:
// the governor turns mail events into keys and limits, the limiter counts.
package limiter

import (
	"errors"
	"math"
	"time"

	"sluice/internal/rules"
)

// The rate vocabulary (algorithms, limits, modes and their parsing) lives
// in package rules, below config and limiter; these names keep the
// limiter's callers unchanged.
type (
	// Algorithm is rules.Algorithm.
	Algorithm = rules.Algorithm
	// Limit is rules.Limit.
	Limit = rules.Limit
	// Mode is rules.Mode.
	Mode = rules.Mode
)

// The algorithms, bounds and modes, as rules defines them.
const (
	Anvil     = rules.Anvil
	Exact     = rules.Exact
	Smooth    = rules.Smooth
	MaxExactN = rules.MaxExactN
	Unlimited = rules.Unlimited
	Leaky     = rules.Leaky
	Strict    = rules.Strict
)

// FormatPeriod is rules.FormatPeriod.
func FormatPeriod(d time.Duration) string { return rules.FormatPeriod(d) }

// Never is the RetryAfter of a hit that can never be admitted (n > N).
const Never = time.Duration(math.MaxInt64)

// Check is one limit applied to one key. Several checks in one hit are
// decided together: with Leaky counting, either all count or none does.
type Check struct {
	Key   string // the store key the limit applies to
	Limit Limit  // the limit and its algorithm
	// Counter selects one of up to MaxCounters counters under an Anvil key;
	// they share one window, as anvil's per-client entry does. It must be 0
	// for other algorithms.
	Counter uint8
	// Stat names the figure for peak logging ("connection rate"); empty
	// means "rate".
	Stat string
}

// MaxCounters is how many counters an Anvil key holds.
const MaxCounters = 8

// Decision is the outcome of one check.
type Decision struct {
	// Allowed is whether the hit was admitted.
	Allowed bool
	// Count is how many events the window holds after this hit (for Smooth:
	// the bucket level in events, rounded up).
	Count int64
	// Remaining is how many more events would be admitted now.
	Remaining int64
	// RetryAfter is, when not Allowed, how long until the same hit would
	// be admitted (Never if it never can).
	RetryAfter time.Duration
	// Reset is how long until the key's state has fully drained.
	Reset time.Duration
}

// Lease is one held concurrency slot.
type Lease struct {
	Key string // the key whose count it holds
	ID  uint64 // tells this lease from the key's others, for Release
}

// Reservation is a future slot under an Exact limit.
type Reservation struct {
	Key   string // the key booked
	Limit Limit  // the Exact limit it was booked under
	N     int64  // the events booked
	// At is when the slot is the holder's.
	At time.Time
}

// Errors returned by stores.
var (
	// ErrFull means the store is at its key cap and configured not to
	// evict; the caller applies its fail mode.
	ErrFull = errors.New("limiter: store full")
	// ErrTooLong means a reservation would wait longer than allowed.
	ErrTooLong = errors.New("limiter: wait longer than allowed")
	// ErrBadRequest means a request is malformed (a programming error).
	ErrBadRequest = errors.New("limiter: bad request")
)
