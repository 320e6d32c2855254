package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"sluice/bench/internal/rounds"
)

// results are the rounds' measures per target and c.
type results struct {
	mps      rounds.Series // messages per second, sending only
	cpu      rounds.Series // the milter process's CPU time per message, us
	cs       rounds.Series // its context switches per message
	measured []string      // the targets run, in the table's order
}

// targets are the measured targets, in the table's order.
func (r *results) targets() []string { return r.measured }

// has reports whether every one of ts was measured.
func (r *results) has(ts ...string) bool {
	for _, t := range ts {
		if !slices.Contains(r.measured, t) {
			return false
		}
	}
	return true
}

// pairs are the ratio lines' families whose two targets were measured:
// with BASELINE, sluice-connect/baseline-connect first, then ratioPairs.
func (r *results) pairs() []ratioPair {
	all := ratioPairs
	if r.has(baselineTarget) {
		all = append([]ratioPair{{"sluice-connect", baselineTarget, []int{1, 10, 100}}}, ratioPairs...)
	}
	return slices.DeleteFunc(slices.Clone(all), func(p ratioPair) bool { return !r.has(p.num, p.den) })
}

// ratioPair is one family of "milter ratio" lines: num's median rate over
// den's at each c of cs, in that order.
type ratioPair struct {
	num, den string
	cs       []int
}

// ratioPairs are the ratio lines in the order bench/milter.sh printed
// them; the last is sluice-connect/postfix-alone at c=10.
var ratioPairs = []ratioPair{
	{"sluice-all", "libmilter", []int{1, 10, 100}},
	{"sluice-all", "postfix-alone", []int{1, 10, 100}},
	{"sluice-connect", "libmilter-connect", []int{1, 10, 100}},
	{"floor", "postfix-alone", []int{1, 10, 100}},
	{"sluice-connect", "floor", []int{100, 1, 10}},
	{"sluice-connect", "postfix-alone", []int{100, 1, 10}},
}

// writeTable prints the medians over the rounds, with the slowest and
// fastest round's rate beside each median rate.
func writeTable(w io.Writer, r *results, nRounds, msgSize, cpus int, loadavg string) {
	fmt.Fprintf(w, "medians over %d round(s), one message of %d bytes per SMTP session, %d CPUs shared by smtp-source, Postfix and the milters\n", nRounds, msgSize, cpus)
	fmt.Fprintln(w, "(milter_cpu_us: CPU time of the milter process per message, user + system;")
	fmt.Fprintln(w, "milter_cs: its context switches per message, of the threads alive at the run's end (one born during the run counts whole, one gone before its end not at all);")
	fmt.Fprintln(w, "msgs_min, msgs_max: the slowest and the fastest round's msgs_per_s;")
	fmt.Fprintf(w, "load average at the end: %s):\n", loadavg)
	fmt.Fprintf(w, "%-4s %-18s %12s %14s %10s %10s %10s\n", "c=", "target", "msgs_per_s", "milter_cpu_us", "milter_cs", "msgs_min", "msgs_max")
	for _, c := range concurrency {
		for _, t := range r.targets() {
			m := r.mps.Summary(t, c)
			fmt.Fprintf(w, "%-4d %-18s %12.1f %14.1f %10.1f %10.1f %10.1f\n", c, t, m.Median,
				r.cpu.Median(t, c), r.cs.Median(t, c), m.Min, m.Max)
		}
	}
}

// writeCosts prints what a message cost each milter process: the medians
// over the rounds of its CPU time and context switches per message, each
// with the smallest and largest round's value (postfix-alone has no
// milter: 0), then one "milter cpu sluice-connect/floor c=<c>" line per c,
// the ratio of the median CPU times per message, when both ran.
func writeCosts(w io.Writer, r *results) {
	fmt.Fprintln(w, "cost per message, medians over the rounds (min-max over the rounds):")
	fmt.Fprintf(w, "%-4s %-18s %24s %20s\n", "c=", "target", "milter_cpu_us", "milter_cs")
	for _, c := range concurrency {
		for _, t := range r.targets() {
			fmt.Fprintf(w, "%-4d %-18s %24s %20s\n", c, t, r.cpu.Summary(t, c).WithRange(1), r.cs.Summary(t, c).WithRange(1))
		}
	}
	for _, num := range []string{"sluice-connect", "go-floor"} {
		if !r.has(num, "floor") {
			continue
		}
		for _, c := range concurrency {
			if f := r.cpu.Median("floor", c); f > 0 {
				fmt.Fprintf(w, "milter cpu %s/floor c=%d: %s\n", num, c, rounds.Ratio(r.cpu.Median(num, c), f))
			} else {
				fmt.Fprintf(w, "milter cpu %s/floor c=%d: n/a (the floor's CPU time was below a clock tick)\n", num, c)
			}
		}
	}
}

// ratio is num's median rate over den's at c, as printed.
func (r *results) ratio(num, den string, c int) string {
	return rounds.Ratio(r.mps.Median(num, c), r.mps.Median(den, c))
}

// goal is the ratio num/den at c with its verdict against lim (the
// printed figure is judged, as the script's awk judged it).
func (r *results) goal(num, den string, c int, lim float64) (string, string) {
	return r.ratio(num, den, c), rounds.AtLeast(rounds.RatioValue(r.mps.Median(num, c), r.mps.Median(den, c)), lim)
}

// writeGoals prints the goals and the floor's reach, as
// bench/milter.sh printed them (the goals line ends with a space when
// sluice-all/libmilter ends it), each goal only when its targets ran
// (TARGETS).
func writeGoals(w io.Writer, r *results) {
	var parts []string
	if r.has("sluice-connect", "postfix-alone") {
		g1, v1 := r.goal("sluice-connect", "postfix-alone", 1, 0.80)
		g10, v10 := r.goal("sluice-connect", "postfix-alone", 10, 0.80)
		parts = append(parts, fmt.Sprintf("sluice-connect/postfix-alone c=1 %s (>= 0.80: %s), c=10 %s (>= 0.80: %s)", g1, v1, g10, v10))
	}
	if r.has("sluice-connect", "floor") {
		f1, vf1 := r.goal("sluice-connect", "floor", 1, 0.95)
		f10, vf10 := r.goal("sluice-connect", "floor", 10, 0.95)
		parts = append(parts, fmt.Sprintf("sluice-connect/floor c=1 %s (>= 0.95: %s), c=10 %s (>= 0.95: %s)", f1, vf1, f10, vf10))
	}
	if r.has("sluice-all", "libmilter") {
		var b strings.Builder
		b.WriteString("sluice-all/libmilter ")
		for _, c := range concurrency {
			a, v := r.goal("sluice-all", "libmilter", c, 1.2)
			fmt.Fprintf(&b, "c=%d %s (>= 1.2: %s) ", c, a, v)
		}
		parts = append(parts, b.String())
	}
	fmt.Fprintf(w, "goals: %s\n", strings.Join(parts, "; "))
	if r.has("floor", "postfix-alone") {
		fmt.Fprintf(w, "(floor/postfix-alone is the most any CONNECT-only milter can reach: c=1 %s, c=10 %s)\n",
			r.ratio("floor", "postfix-alone", 1), r.ratio("floor", "postfix-alone", 10))
	}
}

// writeSpreads prints, for every ratio line, the smallest and largest of
// the rounds' own ratios (the targets of a round run interleaved), so
// that a ratio is read with its spread.
func writeSpreads(w io.Writer, r *results) {
	fmt.Fprintln(w, "spread of each ratio below over the rounds (each round's own num/den):")
	for _, p := range r.pairs() {
		for _, c := range p.cs {
			fmt.Fprintf(w, "spread %s/%s c=%d: %s\n", p.num, p.den, c, r.mps.RoundRatios(p.num, p.den, c).Spread(2))
		}
	}
}

// writeRatios prints the "milter ratio" lines, exactly as bench/milter.sh
// printed them.
func writeRatios(w io.Writer, r *results) {
	for _, p := range r.pairs() {
		for _, c := range p.cs {
			fmt.Fprintf(w, "milter ratio %s/%s c=%d: %s\n", p.num, p.den, c, r.ratio(p.num, p.den, c))
		}
	}
}
