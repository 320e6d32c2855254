package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"sluice/bench/internal/daemons"
	"sluice/bench/internal/procstat"
	"sluice/bench/internal/rounds"
)

const (
	probeMessages = 1001                   // the limit is 1000: exactly one refusal expected
	warmup        = 500 * time.Millisecond // policyload's unmeasured warm-up per run
)

// bench is one run of the benchmark.
type bench struct {
	s          settings
	set        *daemons.Set
	dir        string
	port       map[string]int // by target
	sluice     *daemons.Proc
	floor      *daemons.Proc
	cfloor     *daemons.Proc
	baseline   *daemons.Proc // nil without BASELINE
	prl        *daemons.Proc
	postfwdSID int
	hz         float64
}

func (b *bench) path(name string) string { return filepath.Join(b.dir, name) }

func (b *bench) addr(t string) string { return "127.0.0.1:" + strconv.Itoa(b.port[t]) }

func run(ctx context.Context, s settings, stdout io.Writer) error {
	for _, f := range []string{"/usr/sbin/postfwd2", "/usr/bin/policyd-rate-limit"} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%s is missing (bench/policy.sh installs postfwd and policyd-rate-limit): %w", f, err)
		}
	}
	disableService("postfwd", "/run/postfwd.pid")
	disableService("policyd-rate-limit", "/run/policyd-rate-limit/policyd-rate-limit.pid")
	// Their default endpoints: anything still there competes for the CPUs.
	warnSystemPeers()
	set, err := daemons.New("sluice-bench-policy.", 15*time.Second)
	if err != nil {
		return err
	}
	defer set.Close(10 * time.Second)
	b := &bench{s: s, set: set, dir: set.Dir, port: map[string]int{}, hz: procstat.ClockTick()}
	defer func() {
		if b.postfwdSID == 0 { // interrupted while postfwd2 was starting
			b.postfwdSID = readPID(b.path("postfwd/master.pid"))
		}
		if b.postfwdSID > 0 {
			daemons.StopSession(b.postfwdSID, 15*time.Second)
		}
	}()
	if err := b.build(ctx); err != nil {
		return err
	}
	var used []int
	for _, t := range s.targets() {
		p, err := daemons.FreeTCPPort(used...)
		if err != nil {
			return err
		}
		b.port[t], used = p, append(used, p)
	}
	starts := []func(context.Context) error{b.startSluice, b.startFloor, b.startCFloor, b.startPostfwd, b.startPRL}
	if s.baseline != "" {
		starts = append(starts, b.startBaseline)
	}
	for _, start := range starts {
		if err := start(ctx); err != nil {
			return err
		}
	}
	daemons.Logf("postfwd %s, policyd-rate-limit %s, %s, %d CPUs", pkgVersion("postfwd"), pkgVersion("policyd-rate-limit"),
		runtime.Version(), runtime.NumCPU())
	if err := b.probes(ctx, stdout); err != nil {
		return err
	}
	checkQuiet(stdout, "before the runs")
	res, err := b.rounds(ctx, stdout)
	if err != nil {
		return err
	}
	// All servers must still be up: a crash during the runs would
	// otherwise only show as errors above.
	if err := b.checkAlive(); err != nil {
		return err
	}
	checkQuiet(stdout, "after the runs")
	fmt.Fprintln(stdout)
	writeTable(stdout, res, s, runtime.NumCPU())
	fmt.Fprintln(stdout)
	writeGoals(stdout, res)
	fmt.Fprintln(stdout)
	writeSpreads(stdout, res)
	fmt.Fprintln(stdout)
	writeCosts(stdout, res)
	fmt.Fprintln(stdout)
	writeRatios(stdout, res)
	return nil
}

// pkgVersion is a Debian package's installed version, "?" if unknown.
func pkgVersion(name string) string {
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", name).Output()
	if err != nil || len(out) == 0 {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

// checkQuiet warns if the CPUs were more than 10% busy for 2 s with the
// servers idle: other work makes the numbers noisy.
func checkQuiet(w io.Writer, when string) {
	fmt.Fprintf(w, "load average %s: %s\n", when, procstat.LoadAvg())
	if busy, err := procstat.CPUBusy(2 * time.Second); err == nil && busy > 10 {
		fmt.Fprintf(w, "warning: %s, with the servers idle, the CPUs were %d%% busy: other work on this machine makes these numbers noisy\n", when, busy)
	}
}

// checkAlive fails unless all the servers still run.
func (b *bench) checkAlive() error {
	last := func(path string) string {
		data, _ := os.ReadFile(path)
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		return strings.Join(lines[max(0, len(lines)-5):], "\n")
	}
	if !b.sluice.Alive() {
		return fmt.Errorf("sluice exited; its log: %s", last(b.path("sluice.log")))
	}
	if !b.floor.Alive() {
		return fmt.Errorf("the floor exited; its log: %s", last(b.path("floor.log")))
	}
	if !b.cfloor.Alive() {
		return fmt.Errorf("the C floor exited; its log: %s", last(b.path("cfloor.log")))
	}
	if b.baseline != nil && !b.baseline.Alive() {
		return fmt.Errorf("the baseline exited; its log: %s", last(b.path("baseline.log")))
	}
	if !b.prl.Alive() {
		return fmt.Errorf("policyd-rate-limit exited; its log: %s", last(b.path("prl/log")))
	}
	for _, p := range procstat.SessionPIDs(b.postfwdSID) {
		if strings.Contains(procstat.Cmdline(p), "postfwd2::policy") {
			return nil
		}
	}
	return fmt.Errorf("postfwd2 exited; its log: %s", last(b.path("postfwd/syslog")))
}

// policyload runs the load generator with args against target; its
// standard error goes to policyload.err. status is its exit status, cpu
// the CPU time it used (user + system).
func (b *bench) policyload(ctx context.Context, args ...string) (out string, status int, cpu time.Duration, err error) {
	errf, err := os.Create(b.path("policyload.err"))
	if err != nil {
		return "", 0, 0, err
	}
	defer errf.Close()
	cmd := exec.CommandContext(ctx, b.path("policyload"), args...)
	cmd.Stderr = errf
	o, err := cmd.Output()
	if ps := cmd.ProcessState; ps != nil {
		cpu = ps.UserTime() + ps.SystemTime()
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return strings.TrimSpace(string(o)), exit.ExitCode(), cpu, nil
	}
	return strings.TrimSpace(string(o)), 0, cpu, err
}

// probes checks that each server limits: one sender's 1001 messages, of
// which the last must be refused.
func (b *bench) probes(ctx context.Context, w io.Writer) error {
	daemons.Logf("probing: %d one-recipient messages from one sender per server", probeMessages)
	for _, t := range b.s.targets() {
		if t == "floor" || t == "cfloor" {
			fmt.Fprintf(w, "probe %s: not probed (no rule: it answers DUNNO to every request)\n", t)
			continue
		}
		out, st, _, err := b.policyload(ctx, "-addr", b.addr(t), "-probe", strconv.Itoa(probeMessages), "-label", t)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil || st != 0 {
			fmt.Fprintln(os.Stderr, out)
			tail(b.path("policyload.err"), 1000)
			return fmt.Errorf("the probe of %s failed (status %d, %v)", t, st, err)
		}
		if err := writeProbe(w, t, out); err != nil {
			return err
		}
	}
	return b.checkAlive()
}

// writeProbe prints a probe's result line as bench/policy.sh did, with a
// warning when the server refused none, or not exactly the last message.
func writeProbe(w io.Writer, t, out string) error {
	admitted, err := rounds.Number(out, "admitted")
	if err != nil {
		return err
	}
	refused, err := rounds.Number(out, "refused")
	if err != nil {
		return err
	}
	field := func(name string) string { v, _ := rounds.Field(out, name); return v }
	if refused > 0 {
		_, action, _ := strings.Cut(out, "first_action=")
		fmt.Fprintf(w, "probe %s: admitted=%s refused=%s (first refused: message %s; refused at RCPT %s, at END-OF-MESSAGE %s: %s)\n",
			t, field("admitted"), field("refused"), field("first_refused"), field("refused_rcpt"), field("refused_eom"), action)
	} else {
		fmt.Fprintf(w, "probe %s: admitted=%s refused=%s\n", t, field("admitted"), field("refused"))
	}
	switch {
	case refused == 0:
		bang := strings.Repeat("!", 76)
		fmt.Fprintf(w, "%s\n!!! WARNING: %s refused none of %d messages from one sender:\n", bang, t, probeMessages)
		fmt.Fprintln(w, "!!! its rule is not active, its configuration is wrong, and its numbers")
		fmt.Fprintf(w, "!!! below measure a server that limits nothing.\n%s\n", bang)
	case admitted != probeMessages-1:
		fmt.Fprintf(w, "warning: %s admitted %s of %d messages, not %d\n", t, field("admitted"), probeMessages, probeMessages-1)
	}
	return nil
}

// serverTicks is the CPU time, in clock ticks, used so far by target's
// processes (postfwd2: all of its session).
func (b *bench) serverTicks(t string) uint64 { return b.sumPIDs(t, procstat.Ticks) }

// serverSwitches is the context switches so far of target's processes'
// live threads (postfwd2: all of its session).
func (b *bench) serverSwitches(t string) uint64 { return b.sumPIDs(t, procstat.Switches) }

// sumPIDs sums f over target's processes.
func (b *bench) sumPIDs(t string, f func(int) uint64) uint64 {
	var pids []int
	switch t {
	case "sluice":
		pids = []int{b.sluice.PID()}
	case "floor":
		pids = []int{b.floor.PID()}
	case "cfloor":
		pids = []int{b.cfloor.PID()}
	case "baseline":
		pids = []int{b.baseline.PID()}
	case "policyd-rate-limit":
		pids = []int{b.prl.PID()}
	case "postfwd":
		pids = procstat.SessionPIDs(b.postfwdSID)
	}
	var sum uint64
	for _, p := range pids {
		sum += f(p)
	}
	return sum
}
