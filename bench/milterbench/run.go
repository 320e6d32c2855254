package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"sluice/bench/internal/daemons"
	"sluice/bench/internal/procstat"
	"sluice/bench/internal/rounds"
)

const (
	msgSize      = 2000              // bytes per message
	drainTimeout = 180 * time.Second // for Postfix to deliver what a run sent
	sendTimeout  = 10 * time.Minute  // for smtp-source to send a run's messages
)

// bench is one run of the benchmark.
type bench struct {
	s       settings
	set     *daemons.Set
	dir     string
	procs   map[string]*daemons.Proc // milters by target, Postfix runners by "pf-"+target
	port    map[string]int           // Postfix's SMTP port by target
	maillog map[string]string        // by target
	sent    map[string]int           // messages sent so far, by target
	hz      float64                  // clock ticks per second
}

// measure is one run's figures.
type measure struct{ mps, cpu, cs float64 }

func run(ctx context.Context, s settings, stdout io.Writer) error {
	for _, tool := range []string{"smtp-source", "cc", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is missing: %w", tool, err)
		}
	}
	set, err := daemons.New("sluice-bench-milter.", 60*time.Second)
	if err != nil {
		return err
	}
	defer set.Close(40 * time.Second)
	// The Postfix runners' stdin: its end (this process gone) stops them.
	alive, keep, err := os.Pipe()
	if err != nil {
		return err
	}
	defer keep.Close()
	b := &bench{s: s, set: set, dir: set.Dir, procs: map[string]*daemons.Proc{}, port: map[string]int{},
		maillog: map[string]string{}, sent: map[string]int{}, hz: procstat.ClockTick()}
	err = b.build(ctx)
	if err == nil {
		err = b.startMilters(ctx)
	}
	if err == nil {
		err = b.startPostfix(ctx, alive)
	}
	alive.Close()
	if err != nil {
		return err
	}
	b.logVersions()
	// Warm-up, not timed: master forks the smtpd and cleanup processes
	// that c=100 needs (they then stay: max_idle = 3600s), and the milters
	// see their first sessions.
	for _, t := range b.s.targets() {
		if _, err := b.run(ctx, t, 100, 200); err != nil {
			return err
		}
	}
	if err := b.checkAlive(); err != nil {
		return err
	}
	warnBusy(stdout, "before")
	res, err := b.rounds(ctx, stdout)
	if err != nil {
		return err
	}
	if err := b.checkAlive(); err != nil {
		return err
	}
	warnBusy(stdout, "after")
	for _, t := range b.s.targets() {
		fmt.Fprintf(stdout, "delivered %s: %d of %d sent (warm-up included)\n", t, b.delivered(t), b.sent[t])
	}
	fmt.Fprintln(stdout)
	writeTable(stdout, res, s.rounds, msgSize, runtime.NumCPU(), procstat.LoadAvg())
	fmt.Fprintln(stdout)
	writeCosts(stdout, res)
	fmt.Fprintln(stdout)
	if err := b.memory(ctx, stdout); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	writeGoals(stdout, res)
	fmt.Fprintln(stdout)
	writeSpreads(stdout, res)
	fmt.Fprintln(stdout)
	writeRatios(stdout, res)
	return nil
}

// logVersions logs what is measured, and on what.
func (b *bench) logVersions() {
	pf, err := exec.Command("/usr/sbin/postconf", "-d", "-h", "mail_version").Output()
	if err != nil {
		pf = []byte("?")
	}
	lm, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", "libmilter1.0.1").Output()
	if err != nil || len(lm) == 0 {
		lm = []byte("?")
	}
	daemons.Logf("postfix %s, libmilter %s, %s, %d CPUs, load average %s", strings.TrimSpace(string(pf)),
		strings.TrimSpace(string(lm)), runtime.Version(), runtime.NumCPU(), procstat.LoadAvg())
	daemons.Logf("%d round(s), c in %s with %s messages of %d bytes", b.s.rounds, joinInts(concurrency), joinInts(b.s.msgs), msgSize)
}

// warnBusy warns if the CPUs were more than 10% busy for 2 s while every
// daemon was idle.
func warnBusy(w io.Writer, when string) {
	if busy, err := procstat.CPUBusy(2 * time.Second); err == nil && busy > 10 {
		fmt.Fprintf(w, "warning: %s the runs, with every daemon idle, the CPUs were %d%% busy: other work on this machine makes these numbers noisy\n", when, busy)
	}
}

// rounds runs every target at every c, s.rounds times, interleaved, and
// prints each run.
func (b *bench) rounds(ctx context.Context, w io.Writer) (*results, error) {
	res := &results{measured: b.s.targets()}
	for round := 1; round <= b.s.rounds; round++ {
		order := rounds.Order(b.s.targets(), round)
		for ci, c := range concurrency {
			n := b.s.msgs[ci]
			for _, t := range order {
				m, err := b.run(ctx, t, c, n)
				if err != nil {
					return nil, err
				}
				fmt.Fprintf(w, "round %d: target=%s c=%d msgs=%d delivered=%d msgs_per_s=%.1f milter_cpu_us_per_msg=%.1f milter_cs_per_msg=%.1f\n",
					round, t, c, n, n, m.mps, m.cpu, m.cs)
				res.mps.Add(t, c, m.mps)
				res.cpu.Add(t, c, m.cpu)
				res.cs.Add(t, c, m.cs)
			}
		}
	}
	return res, nil
}

// oneDecimal is v as printed with one decimal: the medians are taken of
// the figures printed, as the script took them.
func oneDecimal(v float64) float64 {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'f', 1, 64), 64)
	return r
}

// run is one smtp-source run against target at c parallel sessions with n
// messages, then a wait until Postfix has delivered every message.
func (b *bench) run(ctx context.Context, t string, c, n int) (measure, error) {
	var k0, k1 uint64
	var s0, s1 map[int]uint64
	p := b.procs[t]
	if p != nil {
		k0, s0 = procstat.Ticks(p.PID()), procstat.ThreadSwitches(p.PID())
	}
	t0 := time.Now()
	// A Postfix that stops answering (once, its postlogd died of a watchdog
	// timeout) would otherwise hang the run for ever.
	sctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	out, err := exec.CommandContext(sctx, "smtp-source", "-s", strconv.Itoa(c), "-m", strconv.Itoa(n),
		"-l", strconv.Itoa(msgSize), "-f", "sender@example.org", "-t", "rcpt@example.net",
		"127.0.0.1:"+strconv.Itoa(b.port[t])).CombinedOutput()
	secs := time.Since(t0).Seconds()
	if ctx.Err() != nil { // interrupted: nothing to report
		return measure{}, ctx.Err()
	}
	if sctx.Err() != nil {
		b.complaints(t)
		return measure{}, fmt.Errorf("smtp-source against %s at c=%d did not finish in %v: its Postfix stopped answering (its maillog's last complaints above)",
			t, c, sendTimeout)
	}
	if err != nil {
		os.Stderr.Write(out)
		return measure{}, fmt.Errorf("smtp-source against %s at c=%d failed: %w", t, c, err)
	}
	if p != nil {
		k1, s1 = procstat.Ticks(p.PID()), procstat.ThreadSwitches(p.PID())
	}
	b.sent[t] += n
	if err := b.waitDelivered(ctx, t, b.sent[t]); err != nil {
		return measure{}, err
	}
	return measure{
		mps: oneDecimal(float64(n) / secs),
		cpu: oneDecimal((float64(k1) - float64(k0)) / b.hz / float64(n) * 1e6),
		cs:  oneDecimal(float64(procstat.SwitchesSince(s0, s1)) / float64(n)),
	}, nil
}

var (
	deliveredLine = regexp.MustCompile(`postfix/discard\[.*status=sent`)
	troubleLine   = regexp.MustCompile(`reject|warning|error|fatal`)
)

// delivered is the messages target's Postfix has delivered (to discard)
// so far.
func (b *bench) delivered(t string) int {
	data, _ := os.ReadFile(b.maillog[t])
	return countLines(string(data), deliveredLine)
}

// countLines counts the lines of s that match re.
func countLines(s string, re *regexp.Regexp) int {
	n := 0
	for line := range strings.SplitSeq(s, "\n") {
		if re.MatchString(line) {
			n++
		}
	}
	return n
}

// waitDelivered waits until target has delivered want messages; more or
// fewer after drainTimeout is an error, with the maillog's last
// complaints on stderr.
func (b *bench) waitDelivered(ctx context.Context, t string, want int) error {
	got := 0
	for deadline := time.Now().Add(drainTimeout); ; {
		if got = b.delivered(t); got >= want || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if got == want {
		return nil
	}
	b.complaints(t)
	return fmt.Errorf("%s: Postfix delivered %d messages, %d were sent", t, got, want)
}

// complaints copies the last ten complaints of target's maillog (the run's
// directory is removed at exit) to stderr.
func (b *bench) complaints(t string) {
	data, _ := os.ReadFile(b.maillog[t])
	var bad []string
	for line := range strings.SplitSeq(string(data), "\n") {
		if troubleLine.MatchString(line) {
			bad = append(bad, line)
		}
	}
	fmt.Fprintln(os.Stderr, strings.Join(bad[max(0, len(bad)-10):], "\n"))
}

// checkAlive fails unless every daemon still runs.
func (b *bench) checkAlive() error {
	for name, p := range b.procs {
		if !p.Alive() {
			return fmt.Errorf("%s exited; see %s (removed at exit)", name, b.dir)
		}
	}
	return nil
}

// memory opens the idle milter sessions to sluice-connect and prints
// what they cost in RSS.
func (b *bench) memory(ctx context.Context, w io.Writer) error {
	p := b.procs["sluice-connect"]
	daemons.Logf("opening %d idle milter sessions to sluice-connect (pid %d)", b.s.idle, p.PID())
	var errBuf strings.Builder
	cmd := exec.CommandContext(ctx, b.path("milterload"), "idle", "-socket", b.sock("sluice-connect"),
		"-n", strconv.Itoa(b.s.idle), "-pid", strconv.Itoa(p.PID()))
	cmd.Stderr = &errBuf
	out, err := cmd.Output()
	if err != nil {
		fmt.Fprint(os.Stderr, errBuf.String())
		return fmt.Errorf("the idle sessions could not be opened: %w", err)
	}
	if err := b.checkAlive(); err != nil {
		return err
	}
	mem := strings.TrimSpace(string(out))
	per, err := rounds.Number(mem, "per_session_bytes")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "memory: %s\n", mem)
	fmt.Fprintf(w, "Memory: RSS with %d idle milter sessions open: %.1f KiB per session (target <= 16 KiB: %s)\n",
		b.s.idle, per/1024, rounds.AtMost(per, 16384))
	return nil
}
