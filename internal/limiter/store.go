package limiter

import (
	"context"
	"fmt"
	"time"
)

// Store keeps the state behind every key and applies the algorithms to it.
//
// Contract, which store/storetest checks for every backend:
//   - Every method is safe for concurrent use, and each call is atomic: the
//     checks of one Hit are decided and recorded as one step.
//   - Time is passed in (now); a store never reads the clock for decisions.
//     A store shared by several hosts may use its own server time instead,
//     and says so.
//   - The store expires idle state by itself: an Anvil window after its
//     Period, an Exact log when its newest event is older than Period, a
//     Smooth key when its bucket is empty, a lease key when it has no
//     leases. Expiry is invisible to callers.
//   - The store holds a bounded number of keys; at the cap it evicts idle
//     state or returns ErrFull, as configured.
type Store interface {
	// Hit records n events against every check, atomically, and fills
	// out[i] with the decision for checks[i]. In Leaky mode nothing is
	// recorded unless every check allows it.
	Hit(ctx context.Context, now time.Time, n int64, mode Mode, checks []Check, out []Decision) error
	// Peek fills out with the decisions a hit of n would get, changing
	// nothing. Stale windows report zero counts.
	Peek(ctx context.Context, now time.Time, n int64, checks []Check, out []Decision) error
	// Undo takes back n events recorded by a Hit at time at (for a message
	// that was finally not sent). Events already outside their window are
	// left alone.
	Undo(ctx context.Context, now, at time.Time, n int64, checks []Check) error

	// Reserve books n events under an Exact limit at the earliest time that
	// keeps the limit, first come first served, and returns that time. If
	// it is more than maxWait away nothing is booked and ErrTooLong is
	// returned along with the time that would have been given.
	Reserve(ctx context.Context, now time.Time, key string, lim Limit, n int64, maxWait time.Duration) (Reservation, error)
	// Cancel gives back a reservation whose time has not come yet.
	Cancel(ctx context.Context, now time.Time, r Reservation) error

	// Acquire takes one concurrency slot of key if fewer than capacity are
	// held (capacity <= 0: no cap) and returns the lease and the number
	// held afterwards; ok is false when the key is at capacity. A lease
	// with ttl > 0 ends by itself after ttl.
	Acquire(ctx context.Context, now time.Time, key string, capacity int64, ttl time.Duration) (l Lease, held int64, ok bool, err error)
	// Release ends a lease and returns the number still held. Releasing a
	// lease twice, or one that expired, is not an error.
	Release(ctx context.Context, now time.Time, l Lease) (held int64, err error)
	// Held returns the number of leases held on key.
	Held(ctx context.Context, now time.Time, key string) (int64, error)

	// Keys returns up to max keys held (counting or leased) that begin
	// with prefix, in no particular order: what an administrator lists.
	// A store shared by several hosts lists what all of them counted.
	Keys(ctx context.Context, now time.Time, prefix string, max int) ([]string, error)
	// Forget drops the given keys' state, as if they had never been hit,
	// and returns how many held any: an administrator's reset.
	Forget(ctx context.Context, now time.Time, keys []string) (int, error)

	// Len returns the number of keys held.
	Len() int
	// Close releases the store's resources and stops its background work.
	Close() error
}

// CheckRequest is the argument check every store applies to Hit, Peek and
// Undo: n not negative, room for a decision per check, counters only on
// anvil limits, and valid limits. Its errors wrap ErrBadRequest.
func CheckRequest(n int64, checks []Check, out []Decision) error {
	if n < 0 || len(out) < len(checks) {
		return fmt.Errorf("%w: n=%d, %d checks, %d decisions", ErrBadRequest, n, len(checks), len(out))
	}
	for _, c := range checks {
		if c.Counter >= MaxCounters || (c.Counter != 0 && c.Limit.Algorithm != Anvil) {
			return fmt.Errorf("%w: counter %d for %s limit", ErrBadRequest, c.Counter, c.Limit.Algorithm)
		}
		if err := c.Limit.Validate(); err != nil {
			return fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
	}
	return nil
}

// CheckReservation is the argument check every store applies to Reserve:
// an Exact, valid limit, n at least 1 (ErrBadRequest), and n that fits
// in one window (ErrTooLong: such a booking could never be given).
func CheckReservation(lim Limit, n int64) error {
	if lim.Algorithm != Exact || n < 1 {
		return fmt.Errorf("%w: reservations need an exact limit and n >= 1", ErrBadRequest)
	}
	if err := lim.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	if n > lim.N {
		return fmt.Errorf("%w: %d events can never fit in %s", ErrTooLong, n, lim)
	}
	return nil
}
