package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"sluice/bench/internal/daemons"
	"sluice/bench/internal/rounds"
)

// The stall measurement (-stall): sluice serve on the Redis store
// (deadline -deadline, fail_mode "open") under the policy load at c=64
// while its redis-server is stopped by SIGSTOP for -stop and continued,
// in rounds alternating with a baseline binary when -baseline names one.
// Each run prints the decisions that started while Redis was stopped:
// their rate, and the p99 and largest latency of those that started
// after the first misses (one deadline after the SIGSTOP: by then the
// calls in flight at the stop have missed), the figure of issue 26
// (p99 at most 2 x the deadline).

// stallRun is one run's figures.
type stallRun struct {
	decisions int           // started while Redis was stopped
	rps       float64       // of those, per second of the stop
	p99After  time.Duration // p99 of those started after the first misses
	maxAfter  time.Duration
	p99All    time.Duration // p99 of all started while stopped
}

// exchange is one exchange: when it started (since the run began) and how
// long it took.
type exchange struct{ start, took time.Duration }

func (b *bench) stall(ctx context.Context) error {
	if err := b.startRedis(ctx); err != nil {
		return err
	}
	bins := []string{b.sluice}
	names := []string{"sluice"}
	if b.s.baseline != "" {
		bins = append(bins, b.s.baseline)
		names = append(names, "baseline")
	}
	fmt.Fprintf(b.out, "stall: redis-server stopped for %s under c=%d, deadline %s, fail_mode open, %d round(s); sluice %s, baseline %q\n",
		b.s.stop, conc, b.s.deadline, b.s.rounds, b.sluice, b.s.baseline)
	var p99 rounds.Series
	for round := 1; round <= b.s.rounds; round++ {
		for _, name := range rounds.Order(names, round) {
			i := slices.Index(names, name)
			r, err := b.stallOne(ctx, bins[i], name, round)
			if err != nil {
				return fmt.Errorf("%s round %d: %w", name, round, err)
			}
			fmt.Fprintf(b.out, "stall round=%d binary=%s decisions_while_stopped=%d rps_while_stopped=%.0f p99_after_first_misses_ms=%.1f max_after_first_misses_ms=%.1f p99_while_stopped_ms=%.1f\n",
				round, name, r.decisions, r.rps, ms(r.p99After), ms(r.maxAfter), ms(r.p99All))
			p99.Add(name, 0, ms(r.p99After))
		}
	}
	limit := 2 * ms(b.s.deadline)
	for _, name := range names {
		sm := p99.Summary(name, 0)
		fmt.Fprintf(b.out, "stall %s: p99 after the first misses %.1f ms (median; %s), target <= %.0f ms (2 x deadline): %s\n",
			name, sm.Median, sm.Spread(1), limit, rounds.AtMost(sm.Median, limit))
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// stallOne runs bin on the Redis store, stops Redis for the stop time
// a second into the load, and measures.
func (b *bench) stallOne(ctx context.Context, bin, name string, round int) (stallRun, error) {
	var r stallRun
	tag := fmt.Sprintf("stall-%s-%d", name, round)
	port, err := b.port()
	if err != nil {
		return r, err
	}
	state := b.path(tag)
	if err := os.Mkdir(state, 0o700); err != nil {
		return r, err
	}
	if _, err := b.redis.cli(ctx, "flushall"); err != nil {
		return r, err
	}
	conf := sluiceConfig(state, port, "exact", stallKeys, b.redis.addr())
	conf = replaceOnce(conf, `deadline = "1s"`, "deadline = "+strconv.Quote(b.s.deadline.String())+"\nfail_mode = \"open\"")
	sd := &sluiced{set: b.set, bin: bin, conf: state + ".toml", log: state + ".log", addr: "127.0.0.1:" + strconv.Itoa(port)}
	if err := os.WriteFile(sd.conf, []byte(conf), 0o644); err != nil {
		return r, err
	}
	daemons.Logf("%s: starting %s", tag, bin)
	if _, err := sd.start(ctx); err != nil {
		return r, err
	}
	defer sd.proc.Stop(time.Minute)
	lead := time.Second
	total := lead + b.s.stop + time.Second
	var (
		stopAt, contAt time.Duration
		wg             sync.WaitGroup
		sigErr         error
	)
	begin := time.Now()
	wg.Go(func() {
		time.Sleep(lead)
		stopAt = time.Since(begin)
		if sigErr = b.redis.proc.Cmd.Process.Signal(syscall.SIGSTOP); sigErr != nil {
			return
		}
		time.Sleep(b.s.stop)
		contAt = time.Since(begin)
		sigErr = b.redis.proc.Cmd.Process.Signal(syscall.SIGCONT)
	})
	ex, err := stallLoad(ctx, sd.addr, begin, total)
	wg.Wait()
	if sigErr != nil {
		return r, sigErr
	}
	if err != nil {
		return r, err
	}
	var all, after []time.Duration
	for _, e := range ex {
		if e.start < stopAt || e.start >= contAt {
			continue
		}
		all = append(all, e.took)
		if e.start >= stopAt+b.s.deadline {
			after = append(after, e.took)
		}
	}
	r.decisions = len(all)
	r.rps = float64(len(all)) / (contAt - stopAt).Seconds()
	r.p99All = quantile(all, 0.99)
	r.p99After = quantile(after, 0.99)
	if len(after) > 0 {
		r.maxAfter = slices.Max(after)
	}
	return r, nil
}

// stallKeys is the senders of the stall load: enough that few are refused.
const stallKeys = 100000

// stallLoad runs conc connections until total has passed since begin,
// each asking for random senders, and returns every exchange.
func stallLoad(ctx context.Context, addr string, begin time.Time, total time.Duration) ([]exchange, error) {
	pcs, err := conns(ctx, addr, conc)
	if err != nil {
		return nil, err
	}
	per := make([][]exchange, len(pcs))
	errs := make([]error, len(pcs))
	var wg sync.WaitGroup
	for w, pc := range pcs {
		wg.Go(func() {
			defer pc.close()
			rng := rand.New(rand.NewPCG(7, uint64(w)))
			for ctx.Err() == nil {
				t0 := time.Since(begin)
				if t0 >= total {
					return
				}
				if err := pc.ask(rng.IntN(stallKeys)); err != nil {
					errs[w] = err
					return
				}
				per[w] = append(per[w], exchange{start: t0, took: time.Since(begin) - t0})
			}
		})
	}
	wg.Wait()
	var out []exchange
	for w := range per {
		if errs[w] != nil {
			return nil, errs[w]
		}
		out = append(out, per[w]...)
	}
	return out, ctx.Err()
}

// quantile is the q-quantile of v (nearest rank), 0 for none.
func quantile(v []time.Duration, q float64) time.Duration {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// replaceOnce replaces the first old in s by repl, or panics: the
// configuration's text is this file's own.
func replaceOnce(s, old, repl string) string {
	if !strings.Contains(s, old) {
		panic("replaceOnce: " + old + " not found")
	}
	return strings.Replace(s, old, repl, 1)
}
