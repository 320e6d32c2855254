package netserve

import "time"

// The defaults of the zero Options. sluice's configuration owns the
// doors' defaults (docs/config.md) and sets each of these explicitly; the
// numbers are the same, and a test in internal/app fails if they drift.
const (
	DefaultMaxConns       = 4096
	DefaultIdleTimeout    = time.Hour
	DefaultRequestTimeout = 10 * time.Second
)

// AcceptBackoff is the wait before accepting again after an accept that
// failed for a reason that passes (EMFILE and the like), given the wait
// before (0 after an accept that worked): 5 ms, doubling, at most a
// second. Every accept loop of sluice's servers backs off by it.
func AcceptBackoff(prev time.Duration) time.Duration {
	return min(max(2*prev, 5*time.Millisecond), time.Second)
}
