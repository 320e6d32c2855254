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
