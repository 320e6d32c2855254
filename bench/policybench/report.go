package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"sluice/bench/internal/daemons"
	"sluice/bench/internal/rounds"
)

// results are the rounds' measures per target and c.
type results struct {
	targets                  []string // the servers measured, in the table's order
	rps, p50, p99, p999, cpu rounds.Series
	cs                       rounds.Series  // the server's context switches per request
	client                   rounds.Series  // the load generator's CPU time per request
	errors                   map[string]int // by target and c, as "target,c"
}

// own are the ratio lines that come before the peers': sluice against
// the floor and the baseline, those that were measured.
func (r *results) own() []string {
	var t []string
	for _, n := range []string{"floor", "baseline"} {
		if len(r.rps.Values(n, concurrency[0])) > 0 {
			t = append(t, n)
		}
	}
	return t
}

// rounds runs every server at every c, s.rounds times, interleaved, and
// prints each run.
func (b *bench) rounds(ctx context.Context, w io.Writer) (*results, error) {
	res := &results{targets: b.s.targets(), errors: map[string]int{}}
	daemons.Logf("duration %s per run, %d round(s), c in 1 8 64", b.s.duration, b.s.rounds)
	for round := 1; round <= b.s.rounds; round++ {
		// Rotate the order: round 1 starts with sluice, round 2 with postfwd, ...
		order := rounds.Order(res.targets, round)
		for _, c := range concurrency {
			for _, t := range order {
				if err := b.runOnce(ctx, w, res, round, t, c); err != nil {
					return nil, err
				}
			}
		}
	}
	return res, nil
}

// runOnce is one policyload run against t at c, printed and recorded
// with the server's CPU time per request (over warm-up and measured
// period, assumed to run at the measured rate).
func (b *bench) runOnce(ctx context.Context, w io.Writer, res *results, round int, t string, c int) error {
	t0, s0 := b.serverTicks(t), b.serverSwitches(t)
	out, st, lcpu, err := b.policyload(ctx, "-addr", b.addr(t), "-c", strconv.Itoa(c), "-duration", b.s.duration,
		"-warmup", warmup.String(), "-label", t, "-seed", strconv.Itoa(round))
	t1, s1 := b.serverTicks(t), b.serverSwitches(t)
	if ctx.Err() != nil { // interrupted: nothing to report
		return ctx.Err()
	}
	rps, rerr := rounds.Number(out, "rps")
	if err != nil || (st != 0 && st != 1) || rerr != nil {
		fmt.Fprintln(os.Stderr, out)
		tail(b.path("policyload.err"), 1000)
		return fmt.Errorf("policyload against %s at c=%d failed (status %d)", t, c, st)
	}
	secs, err := rounds.Number(out, "secs")
	if err != nil {
		return err
	}
	cpu := serverCPU(float64(t1)-float64(t0), b.hz, rps, secs, warmup.Seconds())
	cs := perRequest(float64(s1)-float64(s0), rps, secs, warmup.Seconds())
	client := perRequest(lcpu.Seconds()*1e6, rps, secs, warmup.Seconds())
	fmt.Fprintf(w, "round %d: %s server_cpu_us=%.1f server_cs=%.2f client_cpu_us=%.1f\n", round, out, cpu, cs, client)
	if st == 1 { // errors are counted in the line; show the first few
		data, _ := os.ReadFile(b.path("policyload.err"))
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		for _, l := range lines[:min(5, len(lines))] {
			fmt.Fprintln(os.Stderr, "  "+l)
		}
	}
	for _, m := range []struct {
		s    *rounds.Series
		name string
	}{{&res.p50, "p50_us"}, {&res.p99, "p99_us"}, {&res.p999, "p999_us"}} {
		v, err := rounds.Number(out, m.name)
		if err != nil {
			return err
		}
		m.s.Add(t, c, v)
	}
	errs, err := rounds.Number(out, "errors")
	if err != nil {
		return err
	}
	res.rps.Add(t, c, rps)
	res.cpu.Add(t, c, cpu)
	res.cs.Add(t, c, cs)
	res.client.Add(t, c, client)
	res.errors[t+","+strconv.Itoa(c)] += int(errs)
	return nil
}

// serverCPU is a server's CPU time per request in microseconds, rounded
// to the one decimal printed: ticks over hz seconds spent on rps requests
// a second for secs plus warm seconds; 0 when nothing was served.
func serverCPU(ticks, hz, rps, secs, warm float64) float64 {
	if rps <= 0 || hz <= 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(strconv.FormatFloat(ticks/hz/(rps*(secs+warm))*1e6, 'f', 1, 64), 64)
	return v
}

// perRequest is n events (context switches) per request served over secs
// plus warm seconds at rps requests a second; 0 when nothing was served.
func perRequest(n, rps, secs, warm float64) float64 {
	if rps <= 0 {
		return 0
	}
	return n / (rps * (secs + warm))
}

// writeTable prints the medians over the rounds, with the slowest and
// fastest round's rate beside each, then a warning per target and c that
// had errors.
func writeTable(w io.Writer, r *results, s settings, cpus int) {
	fmt.Fprintf(w, "medians over %d round(s), %s per run, %d CPUs shared by load generator and servers\n", s.rounds, s.duration, cpus)
	fmt.Fprintln(w, "(server_cpu_us: CPU time the server used per request, all its processes, user + system;")
	fmt.Fprintln(w, "server_cs: the server's context switches per request, all its threads;")
	fmt.Fprintln(w, "client_cpu_us: CPU time the load generator used per request, its whole run;")
	fmt.Fprintln(w, "rps_min, rps_max: the slowest and the fastest round's rps):")
	fmt.Fprintf(w, "%-4s %-20s %12s %10s %10s %10s %14s %10s %14s %12s %12s\n", "c=", "target", "rps", "p50_us", "p99_us", "p999_us", "server_cpu_us", "server_cs", "client_cpu_us", "rps_min", "rps_max")
	for _, c := range concurrency {
		for _, t := range r.targets {
			m := r.rps.Summary(t, c)
			fmt.Fprintf(w, "%-4d %-20s %12.1f %10.1f %10.1f %10.1f %14.1f %10.2f %14.1f %12.1f %12.1f\n", c, t, m.Median,
				r.p50.Median(t, c), r.p99.Median(t, c), r.p999.Median(t, c), r.cpu.Median(t, c), r.cs.Median(t, c),
				r.client.Median(t, c), m.Min, m.Max)
		}
	}
	for _, c := range concurrency {
		for _, t := range r.targets {
			if n := r.errors[t+","+strconv.Itoa(c)]; n > 0 {
				fmt.Fprintf(w, "warning: %s at c=%d had %d errors over all rounds\n", t, c, n)
			}
		}
	}
}

// ratio is sluice's median rate over t's at c, as printed.
func (r *results) ratio(t string, c int) string {
	return rounds.Ratio(r.rps.Median("sluice", c), r.rps.Median(t, c))
}

// writeGoals prints the goals at c=64, as bench/policy.sh did.
func writeGoals(w io.Writer, r *results) {
	pf, prl := r.ratio("postfwd", 64), r.ratio("policyd-rate-limit", 64)
	pfv := rounds.RatioValue(r.rps.Median("sluice", 64), r.rps.Median("postfwd", 64))
	prlv := rounds.RatioValue(r.rps.Median("sluice", 64), r.rps.Median("policyd-rate-limit", 64))
	p99 := r.p99.Values("sluice", 64)
	fmt.Fprintf(w, "goals at c=64: sluice/postfwd %s (>= 25: %s), sluice/policyd-rate-limit %s (>= 4: %s), sluice p99 %s us (<= 3000: %s)\n",
		pf, rounds.AtLeast(pfv, 25), prl, rounds.AtLeast(prlv, 4), rounds.MedianText(p99, 1), rounds.AtMost(rounds.Median(p99), 3000))
	if len(r.rps.Values("floor", 64)) > 0 {
		fl := rounds.RatioValue(r.rps.Median("sluice", 64), r.rps.Median("floor", 64))
		fmt.Fprintf(w, "goal at c=64: sluice/floor %s (>= 0.85: %s)\n", r.ratio("floor", 64), rounds.AtLeast(fl, 0.85))
	}
}

// writeSpreads prints, for every ratio line, the smallest and largest of
// the rounds' own ratios.
func writeSpreads(w io.Writer, r *results) {
	fmt.Fprintln(w, "spread of each ratio below over the rounds (each round's own sluice/server):")
	for _, t := range append(r.own(), peers...) {
		for _, c := range concurrency {
			fmt.Fprintf(w, "spread sluice/%s c=%d: %s\n", t, c, r.rps.RoundRatios("sluice", t, c).Spread(2))
		}
	}
}

// writeRatios prints the "policy ratio" lines: against the floor and the
// baseline first, then against the peers exactly as bench/policy.sh
// printed them; the c=64 line against postfwd comes last.
func writeRatios(w io.Writer, r *results) {
	for _, t := range append(r.own(), peers...) {
		for _, c := range concurrency {
			fmt.Fprintf(w, "policy ratio sluice/%s c=%d: %s\n", t, c, r.ratio(t, c))
		}
	}
}

// writeCosts prints what a request cost each server: the medians over the
// rounds of its CPU time and context switches per request, each with the
// smallest and largest round's value, then one line per c comparing
// sluice's CPU time per request with the C floor's (issue 44: at most
// 1.5 times it at c=1 and c=64).
func writeCosts(w io.Writer, r *results) {
	fmt.Fprintln(w, "cost per request, medians over the rounds (min-max over the rounds):")
	fmt.Fprintf(w, "%-4s %-20s %24s %22s\n", "c=", "target", "server_cpu_us", "server_cs")
	for _, c := range concurrency {
		for _, t := range r.targets {
			cpu, cs := r.cpu.Summary(t, c), r.cs.Summary(t, c)
			fmt.Fprintf(w, "%-4d %-20s %24s %22s\n", c, t, cpu.WithRange(1), cs.WithRange(2))
		}
	}
	if len(r.cpu.Values("cfloor", concurrency[0])) == 0 {
		return
	}
	for _, c := range concurrency {
		floor := r.cpu.Median("cfloor", c)
		if floor <= 0 {
			fmt.Fprintf(w, "policy cpu sluice/cfloor c=%d: n/a (the C floor's CPU time was below a clock tick)\n", c)
			continue
		}
		v := rounds.RatioValue(r.cpu.Median("sluice", c), floor)
		fmt.Fprintf(w, "policy cpu sluice/cfloor c=%d: %s (<= 1.5: %s)\n", c,
			rounds.Ratio(r.cpu.Median("sluice", c), floor), rounds.AtMost(v, 1.5))
	}
}
