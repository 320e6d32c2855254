// Package rules is the vocabulary of sluice's rules, shared by config
// (which validates a file with it) and the governor and limiter (which
// apply it): rate limits and their algorithms, counting modes, what a
// policy rule counts and where, and the default reply texts. It imports
// nothing of sluice's, so every layer can use it.
package rules

import (
	"fmt"
	"math"
	"time"
)

// Algorithm is how a rate limit counts events in time.
type Algorithm uint8

// The algorithms. Each has a trade-off, documented in docs/limiter.md:
//
//   - Anvil: a fixed window of one Period that starts at the key's first
//     event and restarts at the first event after it ends, exactly as
//     Postfix anvil(8) counts. Cheap (one counter) and quick to forgive, but
//     a client can get up to 2N through in just over one Period across a
//     window edge. Windows are whole seconds, as in anvil.
//   - Exact: a sliding log of event times. Never more than N events in any
//     interval of length Period, whatever the concurrency or window edges.
//     Memory grows with N (8 bytes per event held). Supports reservations.
//   - Smooth: GCRA (a token bucket kept as one "theoretical arrival time").
//     O(1) memory per key; admits Burst events at once, then one every
//     Period/N. Best for policing many clients.
const (
	Anvil Algorithm = iota + 1
	Exact
	Smooth
)

var algorithmNames = [...]string{Anvil: "anvil", Exact: "exact", Smooth: "smooth"}

// String is the name a configuration uses for a ("anvil", "exact", "smooth").
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) && algorithmNames[a] != "" {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// ParseAlgorithm parses "anvil", "exact" or "smooth".
func ParseAlgorithm(s string) (Algorithm, error) {
	for a, name := range algorithmNames {
		if name != "" && name == s {
			return Algorithm(a), nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q (want anvil, exact or smooth)", s)
}

// Bounds on limits, so that a typo cannot make a key's state unbounded.
const (
	MaxExactN = 1_000_000 // an exact log holds at most this many events
	MaxPeriod = 366 * 24 * time.Hour
	// Unlimited is an N that never refuses; used to only count.
	Unlimited = math.MaxInt32
)

// Limit is "at most N events per Period", counted by Algorithm.
type Limit struct {
	Algorithm Algorithm
	N         int64
	Period    time.Duration
	// Burst is how many events Smooth admits at once; 0 means N.
	Burst int64
}

// FormatPeriod renders a period the way people write it: "60s", "10m",
// "1h", "1d", "1500ms".
func FormatPeriod(d time.Duration) string {
	switch {
	case d >= 24*time.Hour && d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d >= 10*time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}

// String renders the limit as "N/Period algorithm", as ParseLimit reads it.
func (l Limit) String() string {
	s := fmt.Sprintf("%d/%s %s", l.N, FormatPeriod(l.Period), l.Algorithm)
	if l.Algorithm == Smooth && l.Burst != 0 && l.Burst != l.N {
		s += fmt.Sprintf(" burst=%d", l.Burst)
	}
	return s
}

// BurstOrN is how many events Smooth admits at once: Burst, or N when
// Burst is 0.
func (l Limit) BurstOrN() int64 {
	if l.Burst > 0 {
		return l.Burst
	}
	return l.N
}

// Validate reports what is wrong with the limit, if anything.
func (l Limit) Validate() error {
	switch l.Algorithm {
	case Anvil, Exact, Smooth:
	default:
		return fmt.Errorf("limit %s: unknown algorithm", l)
	}
	if l.N < 1 || l.N > Unlimited {
		return fmt.Errorf("limit %s: count must be between 1 and %d", l, Unlimited)
	}
	if l.Period <= 0 || l.Period > MaxPeriod {
		return fmt.Errorf("limit %s: period must be positive and at most %s", l, MaxPeriod)
	}
	switch l.Algorithm {
	case Anvil:
		if l.Period%time.Second != 0 {
			return fmt.Errorf("limit %s: anvil windows are whole seconds", l)
		}
	case Exact:
		if l.N > MaxExactN {
			return fmt.Errorf("limit %s: exact limits hold at most %d events per key; use smooth for larger counts", l, MaxExactN)
		}
	case Smooth:
		if l.Burst < 0 || l.Burst > Unlimited {
			return fmt.Errorf("limit %s: burst must be between 0 and %d", l, Unlimited)
		}
		if l.Period/time.Duration(l.N) <= 0 {
			return fmt.Errorf("limit %s: more than one event per nanosecond", l)
		}
	}
	return nil
}

// Mode says whether a refused hit still counts.
type Mode uint8

// Counting modes, named as in Exim's ratelimit.
const (
	// Leaky: a refused hit is not counted, so a client that keeps retrying
	// is not punished further.
	Leaky Mode = iota
	// Strict: every hit counts, refused or not; a client must stop to
	// recover.
	Strict
)

var modeNames = [...]string{Leaky: "leaky", Strict: "strict"}

// String is the name a configuration uses for m ("leaky", "strict").
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// ParseMode parses "leaky" (also the empty string, the default) or
// "strict".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "leaky":
		return Leaky, nil
	case "strict":
		return Strict, nil
	}
	return 0, fmt.Errorf("%q is not leaky or strict", s)
}
