// Package loadgen is what the closed-loop load generators (anvilload,
// muxload, policyload) share: their common flags and the checks of them,
// the measured period, the latency summary of a run, and the printing of
// a result with the exit status that goes with it.
package loadgen

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"sluice/bench/internal/hist"
)

// Flags are the settings every generator has.
type Flags struct {
	Conns    int           // -c: concurrent clients
	Duration time.Duration // -duration: the measured period
	Warmup   time.Duration // -warmup: unmeasured, before it
	Label    string        // -label: the target's name in the result
	JSON     bool          // -json: the result as one JSON object
}

// Register defines -c (described by connsUsage), -duration, -warmup,
// -label (default label) and -json on fs.
func (f *Flags) Register(fs *flag.FlagSet, connsUsage, label string) {
	fs.IntVar(&f.Conns, "c", 1, connsUsage)
	fs.DurationVar(&f.Duration, "duration", 5*time.Second, "measured duration")
	fs.DurationVar(&f.Warmup, "warmup", 500*time.Millisecond, "unmeasured warm-up before the measured duration")
	fs.StringVar(&f.Label, "label", label, "target label printed in the result")
	fs.BoolVar(&f.JSON, "json", false, "print the result as one JSON object")
}

// Check reports the first invalid setting of f.
func (f *Flags) Check() error {
	switch {
	case f.Conns < 1:
		return errors.New("-c must be at least 1")
	case f.Duration <= 0:
		return errors.New("-duration must be positive")
	case f.Warmup < 0:
		return errors.New("-warmup must not be negative")
	}
	return nil
}

// Parse parses args into fs and refuses arguments left over; false (the
// caller exits 2) when either fails, the reason written to stderr after
// prog's name.
func Parse(fs *flag.FlagSet, prog string, args []string, stderr io.Writer) bool {
	if err := fs.Parse(args); err != nil {
		return false
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments: %q\n", prog, fs.Args())
		return false
	}
	return true
}

// Window is the measured period: it starts after the warm-up.
type Window struct{ Start, End time.Time }

// NewWindow returns the period of length duration that starts warmup from
// now.
func NewWindow(warmup, duration time.Duration) Window {
	start := time.Now().Add(warmup)
	return Window{Start: start, End: start.Add(duration)}
}

// Holds reports whether an exchange from start to end lies wholly inside
// w, so that its latency is recorded.
func (w Window) Holds(start, end time.Time) bool {
	return !start.Before(w.Start) && !end.After(w.End)
}

// Latency is the summary of a run's merged histogram over secs seconds.
type Latency struct {
	Reqs  uint64  // exchanges in the histogram (those inside the window)
	RPS   float64 // Reqs per second of the window
	P50us float64 // median latency, microseconds
	P99us float64 // 99th percentile, microseconds
	// P999us is the 99.9th percentile, printed by the generators that
	// print it.
	P999us float64
}

// Summarize returns the request count, rate and percentiles (in
// microseconds) of h over secs seconds.
func Summarize(h *hist.Hist, secs float64) Latency {
	us := func(q float64) float64 { return float64(h.Quantile(q)) / 1e3 }
	l := Latency{Reqs: h.Count(), P50us: us(0.50), P99us: us(0.99), P999us: us(0.999)}
	if secs > 0 {
		l.RPS = float64(l.Reqs) / secs
	}
	return l
}

// Print writes res to stdout, as its String or, with asJSON, as one JSON
// object, and returns the exit status: 1 when failed (errors during the
// run) or when the JSON encoding fails (described on stderr after prog's
// name), else 0.
func Print(stdout, stderr io.Writer, prog string, res fmt.Stringer, asJSON, failed bool) int {
	if asJSON {
		b, err := json.Marshal(res)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", prog, err)
			return 1
		}
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		fmt.Fprintln(stdout, res)
	}
	if failed {
		return 1
	}
	return 0
}
