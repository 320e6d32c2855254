// Package rounds is the arithmetic the benchmark drivers (bench/milterbench,
// bench/policybench) share: which target runs first in a round, the values
// of every round per target and concurrency, their median with the
// smallest and largest beside it (the spread), the ratios and verdicts
// printed as the shell scripts printed them, and the key=value result
// lines of the load generators.
package rounds

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Order is targets in the order round runs them: round 1 (the first)
// starts with targets[0], round 2 with targets[1], and so on, wrapping
// around, so that no target always runs first.
func Order(targets []string, round int) []string {
	n := len(targets)
	out := make([]string, 0, n)
	for k := range n {
		out = append(out, targets[((k+round-1)%n+n)%n])
	}
	return out
}

// Median is the middle value of v, or the mean of the middle two for an
// even count; 0 for none.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Summary is a median over rounds with the spread of the rounds: their
// smallest and largest value.
type Summary struct {
	Median, Min, Max float64
	N                int // rounds
}

// Summarize returns v's median, smallest and largest values (all 0 for
// none).
func Summarize(v []float64) Summary {
	if len(v) == 0 {
		return Summary{}
	}
	return Summary{Median: Median(v), Min: slices.Min(v), Max: slices.Max(v), N: len(v)}
}

// Spread is s's rounds as "min X max Y over N round(s)", each value with
// prec decimals.
func (s Summary) Spread(prec int) string {
	word := "rounds"
	if s.N == 1 {
		word = "round"
	}
	return fmt.Sprintf("min %.*f max %.*f over %d %s", prec, s.Min, prec, s.Max, s.N, word)
}

// WithRange is s as "median (min-max)", each value with prec decimals:
// the cost tables' cells.
func (s Summary) WithRange(prec int) string {
	return fmt.Sprintf("%.*f (%.*f-%.*f)", prec, s.Median, prec, s.Min, prec, s.Max)
}

// Ratio is num/den with two decimals, "0.00" when den is not positive:
// the scripts' ratio lines.
func Ratio(num, den float64) string {
	if den <= 0 {
		return "0.00"
	}
	return strconv.FormatFloat(num/den, 'f', 2, 64)
}

// AtLeast is "met" if v >= lim, else "MISSED".
func AtLeast(v, lim float64) string { return verdict(v >= lim) }

// AtMost is "met" if v <= lim, else "MISSED".
func AtMost(v, lim float64) string { return verdict(v <= lim) }

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// RatioValue is Ratio as the number it prints, so that a verdict judges
// the figure shown (the scripts compared the printed ratio).
func RatioValue(num, den float64) float64 {
	v, _ := strconv.ParseFloat(Ratio(num, den), 64)
	return v
}

// key names one series: a target at one concurrency.
type key struct {
	target string
	c      int
}

// Series holds every round's value of one measure per target and
// concurrency, in the order added. Its zero value is ready to use.
type Series struct{ m map[key][]float64 }

// Add appends a round's value for target at c.
func (s *Series) Add(target string, c int, v float64) {
	if s.m == nil {
		s.m = map[key][]float64{}
	}
	k := key{target, c}
	s.m[k] = append(s.m[k], v)
}

// Values is target's values at c, one per round, in round order.
func (s *Series) Values(target string, c int) []float64 { return s.m[key{target, c}] }

// Median is the median of target's values at c.
func (s *Series) Median(target string, c int) float64 { return Median(s.Values(target, c)) }

// Summary is the median and spread of target's values at c.
func (s *Series) Summary(target string, c int) Summary { return Summarize(s.Values(target, c)) }

// RoundRatios summarizes num's value over den's, round by round, at c
// (the targets of one round run interleaved, so a round's ratio is a
// like-for-like comparison); a round where den is not positive counts as
// 0, as Ratio prints it.
func (s *Series) RoundRatios(num, den string, c int) Summary {
	a, b := s.Values(num, c), s.Values(den, c)
	n := min(len(a), len(b))
	r := make([]float64, n)
	for i := range n {
		if b[i] > 0 {
			r[i] = a[i] / b[i]
		}
	}
	return Summarize(r)
}

// Field is the value of name in a line of space-separated name=value
// pairs, as the load generators print their results; false when the line
// has no such pair.
func Field(line, name string) (string, bool) {
	for _, kv := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// Number is Field parsed as a number; an error names the field when it
// is missing or not a number.
func Number(line, name string) (float64, error) {
	v, ok := Field(line, name)
	if !ok {
		return 0, fmt.Errorf("no %s= in %q", name, line)
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("%s=%q is not a number", name, v)
	}
	return f, nil
}

// MedianText is v's median as lib.sh's median printed it, for the lines
// that print a median as such: the middle value as the load generator
// printed it (prec decimals) for an odd count, and for an even count the
// mean of the middle two as awk prints a number (an integer without
// decimals, anything else with six significant digits).
func MedianText(v []float64, prec int) string {
	m := Median(v)
	if len(v)%2 == 1 {
		return strconv.FormatFloat(m, 'f', prec, 64)
	}
	if m == float64(int64(m)) {
		return strconv.FormatInt(int64(m), 10)
	}
	return fmt.Sprintf("%.6g", m)
}
