package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"sluice/bench/internal/hist"
	"sluice/bench/internal/procstat"
)

// roundFlags are the settings of one round.
type roundFlags struct {
	addr          string
	label         string
	known         int
	bots          int
	botsPerNet    int
	base          time.Duration
	baseWarmup    time.Duration
	warmup        time.Duration
	duration      time.Duration
	timeout       time.Duration
	failPause     time.Duration
	botRetry      time.Duration
	singleEvery   time.Duration
	singleTimeout time.Duration
	sid, pid      int // the Postfix instance's master (session) and sluice, whose CPU time is read (0: not read)
}

func (f *roundFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.addr, "addr", "", "the MTA's SMTP address, host:port (required)")
	fs.StringVar(&f.label, "label", "mta", "the row's name in the result line")
	fs.IntVar(&f.known, "known", 4, "known peers (from 127.0.1.0/24), each sending whole messages in a loop")
	fs.IntVar(&f.bots, "bots", 200, "bots (each from its own address, -bots-per-net to a /24 from 127.20.0.0 on) that EHLO and hold the session idle, reconnecting when dropped")
	fs.IntVar(&f.botsPerNet, "bots-per-net", 5, "bots per /24")
	fs.DurationVar(&f.base, "base", 10*time.Second, "the known peers alone first, measured for this long (their goodput without the flood)")
	fs.DurationVar(&f.baseWarmup, "base-warmup", time.Second, "the known peers alone, unmeasured, before -base (smtpd processes started)")
	fs.DurationVar(&f.warmup, "warmup", 5*time.Second, "bots alone before the measured flood")
	fs.DurationVar(&f.duration, "duration", 40*time.Second, "the measured flood")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "a known peer's message fails if not accepted within this (dial to the 250 after the dot)")
	fs.DurationVar(&f.failPause, "fail-pause", 200*time.Millisecond, "a known peer's pause after a failure")
	fs.DurationVar(&f.botRetry, "bot-retry", time.Second, "a bot's pause before it reconnects (jittered by up to half of it)")
	fs.DurationVar(&f.singleEvery, "single-every", 250*time.Millisecond, "a new single sender (its own /24 from 127.60.0.0 on) every this long during the flood, one message each (0: none)")
	fs.DurationVar(&f.singleTimeout, "single-timeout", 30*time.Second, "a single sender's message fails if not accepted within this")
	fs.IntVar(&f.sid, "sid", 0, "the Postfix instance's master pid: the CPU time of its session (every Postfix process, reaped children included) is read over the calm and the flood (0: not read)")
	fs.IntVar(&f.pid, "pid", 0, "sluice's pid, whose CPU time is added (0: none)")
}

// cpu is the CPU time, in clock ticks, of the Postfix instance and of
// sluice (0 without -sid).
func (f *roundFlags) cpu() uint64 {
	if f.sid == 0 {
		return 0
	}
	t := procstat.SessionTreeTicks(f.sid)
	if f.pid != 0 {
		t += procstat.Ticks(f.pid)
	}
	return t
}

func (f *roundFlags) check() error {
	switch {
	case f.addr == "":
		return errors.New("-addr is required")
	case f.known < 1:
		return errors.New("-known must be at least 1")
	case f.bots < 0 || f.botsPerNet < 1:
		return errors.New("-bots must be at least 0 and -bots-per-net at least 1")
	case f.bots/f.botsPerNet >= 40*256:
		return errors.New("-bots: too many networks")
	case f.base <= 0 || f.duration <= 0 || f.warmup < 0 || f.baseWarmup < 0:
		return errors.New("-base and -duration must be positive, -warmup and -base-warmup not negative")
	case f.timeout <= 0 || f.singleTimeout <= 0 || f.singleEvery < 0 || f.botRetry < 0 || f.failPause < 0:
		return errors.New("the timeouts must be positive, the pauses not negative")
	}
	return nil
}

// knownAddr is known peer i's address: 127.0.1.(i+1), one network.
func knownAddr(i int) net.IP { return net.IPv4(127, 0, 1, byte(1+i%250)) }

// botAddr is bot i's address: perNet bots to a /24, the /24s from
// 127.20.0.0 on.
func botAddr(i, perNet int) net.IP {
	n := i / perNet
	return net.IPv4(127, byte(20+n/256), byte(n%256), byte(10+i%perNet))
}

// singleAddr is single sender k's address, each in a /24 of its own from
// 127.60.0.0 on (wrapping after 60*256 of them).
func singleAddr(k int) net.IP {
	n := k % (60 * 256)
	return net.IPv4(127, byte(60+n/256), byte(n%256), 1)
}

// phase is what the known peers did in one measured period.
type phase struct {
	ok   atomic.Int64 // messages accepted within the period (the goodput)
	late atomic.Int64 // messages accepted after it (started within it)
	fail atomic.Int64 // messages refused, or not accepted within the timeout
	mu   sync.Mutex
	lat  hist.Hist // every message's latency, late ones included, a failed one's at the timeout
	errs []string  // the first maxFailures failures' errors, for stderr
}

// maxFailures is how many known peers' failures a phase keeps the error
// of (printed to stderr, "failure: ...", so the wrapper can show why).
const maxFailures = 5

// peers runs the known peers until period ends: each sends one message
// after another. A message still under way when period ends gets its
// timeout to finish (ctx, the run's, cuts it short): it counts as late or
// failed and its latency is recorded (a failed message's as the timeout),
// so that a peer stuck behind the flood shows in the p99 and the
// failures, not only in the goodput.
func (f *roundFlags) peers(ctx, period context.Context, ph *phase) {
	var wg sync.WaitGroup
	for i := range f.known {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src := knownAddr(i)
			for period.Err() == nil {
				d, err := send(ctx, src, f.addr, f.timeout)
				switch {
				case ctx.Err() != nil:
					return
				case err != nil:
					// Not delivered within its timeout: it counts in the
					// latencies at the timeout (its lower bound).
					ph.fail.Add(1)
					ph.mu.Lock()
					ph.lat.Record(f.timeout)
					if len(ph.errs) < maxFailures {
						ph.errs = append(ph.errs, err.Error())
					}
					ph.mu.Unlock()
					sleep(period, f.failPause)
					continue
				case period.Err() != nil:
					ph.late.Add(1)
				default:
					ph.ok.Add(1)
				}
				ph.mu.Lock()
				ph.lat.Record(d)
				ph.mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// botStats counts what the bots did.
type botStats struct {
	held     atomic.Int64 // sessions held right now (EHLO answered 250, still open)
	connects atomic.Int64 // connections made
	refused  atomic.Int64 // greeting or EHLO answered with other than 220/250, or closed before
	dropped  atomic.Int64 // held sessions the server closed
}

// bot holds a session from src until ctx ends: connect, EHLO, then idle
// until the server drops it; after a refusal or a drop it pauses and
// reconnects.
func (f *roundFlags) bot(ctx context.Context, src net.IP, st *botStats) {
	for ctx.Err() == nil {
		c, err := dial(ctx, src, f.addr)
		if err != nil {
			sleep(ctx, jitter(f.botRetry))
			continue
		}
		st.connects.Add(1)
		stop := context.AfterFunc(ctx, func() { c.Close() })
		if c.expect("", 220) != nil || c.expect("EHLO "+heloName(src), 250) != nil {
			if ctx.Err() == nil {
				st.refused.Add(1)
			}
		} else {
			st.held.Add(1)
			_, _ = c.r.ReadString('\n') // idle until the server closes (or ctx closes)
			st.held.Add(-1)
			if ctx.Err() == nil {
				st.dropped.Add(1)
			}
		}
		stop()
		c.Close()
		sleep(ctx, jitter(f.botRetry))
	}
}

var numbers = regexp.MustCompile(`[0-9][0-9.:/]*`)

// failures counts the single senders' failures by their error, its
// numbers (addresses, ports, counts, a reply's code) each made "#" so
// that they do not split one kind.
type failures struct {
	mu sync.Mutex
	n  map[string]int
}

func (w *failures) add(err error) {
	s := numbers.ReplaceAllString(err.Error(), "#")
	if len(s) > 120 {
		s = s[:120]
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == nil {
		w.n = map[string]int{}
	}
	w.n[strings.TrimSpace(s)]++
}

// singles starts a single sender every f.singleEvery until ctx ends; each
// sends one message with f.singleTimeout, whatever ctx does. It returns
// once every one has finished.
func (f *roundFlags) singles(ctx context.Context, ok, n *atomic.Int64, why *failures) {
	if f.singleEvery <= 0 {
		return
	}
	var wg sync.WaitGroup
	t := time.NewTicker(f.singleEvery)
	defer t.Stop()
	for k := 0; ; k++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-t.C:
		}
		n.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := send(context.Background(), singleAddr(k), f.addr, f.singleTimeout); err == nil {
				ok.Add(1)
			} else {
				why.add(err)
			}
		}()
	}
}

func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d + rand.N(d/2+1)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// runRound runs one round against f.addr: the known peers alone for
// f.baseWarmup (unmeasured) and f.base, then the bots alone for f.warmup, then bots, known peers and
// single senders for f.duration (the singles then get their timeout to
// finish), and prints one result line.
func runRound(ctx context.Context, f roundFlags, stdout io.Writer) error {
	var warm, base, flood phase
	wctx, cancel := context.WithTimeout(ctx, f.baseWarmup)
	f.peers(ctx, wctx, &warm)
	cancel()
	bctx, cancel := context.WithTimeout(ctx, f.base)
	cpu0 := f.cpu()
	f.peers(ctx, bctx, &base)
	baseCPU := f.cpu() - cpu0
	cancel()
	if ctx.Err() != nil {
		return ctx.Err()
	}

	var st botStats
	botCtx, stopBots := context.WithCancel(ctx)
	var bots sync.WaitGroup
	for i := range f.bots {
		bots.Add(1)
		go func() {
			defer bots.Done()
			f.bot(botCtx, botAddr(i, f.botsPerNet), &st)
		}()
	}
	defer func() { stopBots(); bots.Wait() }()
	sleep(ctx, f.warmup)
	if ctx.Err() != nil {
		return ctx.Err()
	}

	c0, r0, d0 := st.connects.Load(), st.refused.Load(), st.dropped.Load()
	cpu0 = f.cpu()
	fctx, cancel := context.WithTimeout(ctx, f.duration)
	defer cancel()
	var singleOK, singleN atomic.Int64
	var held []float64
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); f.peers(ctx, fctx, &flood) }()
	var singleWhy failures
	go func() { defer wg.Done(); f.singles(fctx, &singleOK, &singleN, &singleWhy) }()
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-fctx.Done():
				return
			case <-t.C:
				held = append(held, float64(st.held.Load()))
			}
		}
	}()
	<-fctx.Done()
	floodCPU := f.cpu() - cpu0
	conns, refused, dropped := st.connects.Load()-c0, st.refused.Load()-r0, st.dropped.Load()-d0
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	res := result{
		label: f.label, base: f.base, flood: f.duration,
		baseOK: base.ok.Load(), baseFail: base.fail.Load(), baseP99: base.lat.Quantile(0.99),
		floodOK: flood.ok.Load(), floodLate: flood.late.Load(), floodFail: flood.fail.Load(), floodP99: flood.lat.Quantile(0.99),
		singleOK: singleOK.Load(), singleN: singleN.Load(), held: held,
		botConns: conns, botRefused: refused, botDropped: dropped, bots: f.bots,
		cpuRead: f.sid != 0, baseCPU: baseCPU, floodCPU: floodCPU, tick: procstat.ClockTick(),
	}
	fmt.Fprintln(stdout, res.line())
	for _, ph := range []struct {
		name string
		p    *phase
	}{{"base", &base}, {"flood", &flood}} {
		for _, e := range ph.p.errs {
			fmt.Fprintf(os.Stderr, "failure: %s: %s\n", ph.name, e)
		}
	}
	kinds := make([]string, 0, len(singleWhy.n))
	for k := range singleWhy.n {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return singleWhy.n[kinds[i]] > singleWhy.n[kinds[j]] })
	for _, k := range kinds {
		fmt.Fprintf(os.Stderr, "failure: singles: %d x %s\n", singleWhy.n[k], k)
	}
	return nil
}
