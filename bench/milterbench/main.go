// Command milterbench is bench/milter.sh's driver: what sluice's milter
// door costs a real Postfix, side by side with no milter, with libmilter
// milters and with a floor. bench/milter.sh checks for root and the
// packages, then runs it from the repository's root.
//
// Seven private Postfix 3.7 instances (eight with BASELINE, fewer with
// TARGETS, below;
// bench/milterload postfix, built on
// internal/testutil/postfixtest; everything is delivered to discard(8)),
// identical but for smtpd_milters:
//
//	postfix-alone      no milter
//	sluice-connect     sluice serve, class caps only: the milter negotiates
//	                   CONNECT alone (every other step off), so a session
//	                   costs one round trip. The loopback class has
//	                   refuse = 1000, far above the load.
//	sluice-all         sluice serve with milter.policy_rules and one rule
//	                   that counts bytes (2e9 bytes/h per client, never
//	                   reached): the milter asks for every step and accepts.
//	libmilter          an accept-all milter on Debian's libmilter
//	                   (c/acceptall.c): a callback for every step returning
//	                   SMFIS_CONTINUE, SMFIS_ACCEPT at end of message.
//	libmilter-connect  the class-caps milter as an administrator would write
//	                   it on libmilter (c/connectonly.c): a connect callback,
//	                   and xxfi_negotiate switching every other step (and its
//	                   reply) off, as sluice-connect does.
//	floor              the least a CONNECT-only milter can be (c/floor.c):
//	                   one thread, epoll, no limiter, no callbacks; it
//	                   answers the negotiation sluice-connect sends and
//	                   CONNECT and END-OF-MESSAGE with CONTINUE from static
//	                   buffers. Whatever postfix-alone has over floor is the
//	                   MTA's own cost of a milter, out of any milter's reach.
//	go-floor           the same milter written the standard Go way
//	                   (bench/miltergofloor): a goroutine per connection on
//	                   net.Listener and net.Conn. Between floor and go-floor
//	                   lies what the Go runtime costs a session, and where
//	                   sluice's own event loop (internal/netserve) stands.
//
// The C milters are embedded here and built with cc (-O2 -Wall; the
// libmilter ones against libmilter-dev). milter_default_action = tempfail,
// and Postfix's own client limits and in_flow_delay are off, so that only
// the milter differs; max_idle is an hour, so the smtpd processes forked
// for the warm-up at c=100 stay for all runs.
//
// The load is Postfix's smtp-source at 1, 10 and 100 parallel sessions,
// one message (about 2 KB) per SMTP session, so every message costs a
// milter session. Runs are interleaved: in each round, for each c, every
// target gets one run, and which target goes first rotates from round to
// round. After each run the driver waits until Postfix's maillog shows
// every message so far delivered (discard, status=sent) and fails if one
// is missing. It prints every run (messages per second, the milter
// process's CPU time and context switches per message, read from
// /proc/PID/stat and /proc/PID/task/*/status), a table of medians over
// the rounds with the smallest and largest round beside the rate, the
// issue's goals, the spread of each ratio over the rounds, and one
// "milter ratio" line per pair and c (ratio of the median rates); the
// last line is
//
//	milter ratio sluice-connect/postfix-alone c=10: X.XX
//
// preceded by the sluice-connect/floor and floor/postfix-alone lines
// (when the floor runs).
// After the table comes the cost table: each milter's CPU time and context
// switches per message, medians over the rounds with the smallest and
// largest round's value, and one "milter cpu sluice-connect/floor c=<c>"
// line per c (the ratio of the median CPU times per message, when the
// floor runs: c/floor.c is the C floor of the milter protocol), and one
// "milter cpu go-floor/floor c=<c>" line per c when both floors run.
// Between the cost table and the goals, the memory figure: milterload idle
// opens the idle sessions to the running sluice-connect daemon and reads
// its VmRSS before and after (target <= 16 KiB per session).
//
// Settings, from the environment as bench/milter.sh always took them, or
// from the flags, which win:
//
//	QUICK=1   -quick    1 round, 100/300/500 messages, 2,000 idle sessions
//	ROUNDS=n  -rounds   rounds (default 3; QUICK=1 makes it 1)
//	MSGS="a b c" -msgs  messages per run at c = 1, 10, 100 (1000 2000 3000:
//	                    at c=1 a run of 300 lasted under a second, and one
//	                    scheduler hiccup moved its rate by a tenth)
//	IDLE=n    -idle     idle milter sessions for the memory figure (10000)
//	BASELINE=bin -baseline  an older sluice binary, run as an eighth target,
//	                    baseline-connect, in sluice-connect's configuration;
//	                    "milter ratio sluice-connect/baseline-connect c=N"
//	                    lines come first: a change measured before and
//	                    after in one run
//	TARGETS="t ..." -targets  only these targets (postfix-alone and
//	                    sluice-connect always among them: the last line
//	                    needs both, the memory figure sluice-connect;
//	                    baseline-connect comes with BASELINE): more
//	                    rounds of one comparison per minute, e.g.
//	                    TARGETS="postfix-alone sluice-connect
//	                    libmilter-connect floor" ROUNDS=7 (about 6.5
//	                    minutes here). Only the ratio lines and goals
//	                    whose targets ran are printed.
//
// It must run as root (Postfix's master needs it) from the repository's
// root, with smtp-source, cc and libmilter-dev installed. Its daemons run
// in a private directory below /tmp, and a watchdog process stops them and
// removes it if the driver is killed.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"sluice/bench/internal/daemons"
)

func main() {
	daemons.RunWatchdogIfAsked()
	os.Exit(realMain(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// concurrency is the parallel SMTP sessions of the runs, in order.
var concurrency = []int{1, 10, 100}

// targets are the seven Postfix instances, in their first round's order.
var targets = []string{"postfix-alone", "sluice-connect", "sluice-all", "libmilter", "libmilter-connect", "floor", "go-floor"}

// baselineTarget is the target BASELINE adds: an older sluice binary in
// sluice-connect's configuration.
const baselineTarget = "baseline-connect"

// settings are the run's knobs.
type settings struct {
	rounds   int
	msgs     []int // per c in concurrency
	idle     int
	baseline string   // BASELINE: an older sluice binary, measured as baselineTarget
	only     []string // TARGETS: the targets to run (nil: all)
}

// targets are the run's targets: the seven (or TARGETS' subset of them, in
// the seven's order), and baselineTarget with BASELINE.
func (s settings) targets() []string {
	all := targetList(s.baseline != "")
	if s.only == nil {
		return all
	}
	return slices.DeleteFunc(slices.Clone(all), func(t string) bool {
		return t != baselineTarget && !slices.Contains(s.only, t)
	})
}

// requiredTargets are the targets TARGETS must keep: the last ratio line
// is sluice-connect/postfix-alone, and the memory figure is
// sluice-connect's.
var requiredTargets = []string{"postfix-alone", "sluice-connect"}

// parseTargets parses TARGETS: known target names, no repeats, the
// required ones among them.
func parseTargets(v string) ([]string, error) {
	f := strings.Fields(v)
	for i, t := range f {
		switch {
		case t == baselineTarget:
			return nil, fmt.Errorf("TARGETS: %s comes with BASELINE, not in TARGETS", t)
		case !slices.Contains(targets, t):
			return nil, fmt.Errorf("TARGETS: unknown target %q (the targets: %s)", t, strings.Join(targets, " "))
		case slices.Contains(f[:i], t):
			return nil, fmt.Errorf("TARGETS: %s named twice", t)
		}
	}
	for _, t := range requiredTargets {
		if !slices.Contains(f, t) {
			return nil, fmt.Errorf("TARGETS=%q lacks %s (the last ratio line needs postfix-alone and sluice-connect, the memory figure sluice-connect)", v, t)
		}
	}
	return f, nil
}

// targetList is targets, followed by baselineTarget when baseline.
func targetList(baseline bool) []string {
	if !baseline {
		return targets
	}
	return append(slices.Clip(targets), baselineTarget)
}

// parseSettings reads the flags and the environment's knobs (a flag
// wins over its variable) as bench/milter.sh read them: QUICK=1 makes one
// round (whatever ROUNDS says) and smaller defaults for MSGS and IDLE.
func parseSettings(args []string, getenv func(string) string, stderr io.Writer) (settings, error) {
	fs := flag.NewFlagSet("milterbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	quick := fs.Bool("quick", false, "a short run: 1 round, 100/300/500 messages, 2,000 idle sessions (QUICK=1)")
	rounds := fs.Int("rounds", 3, "rounds (ROUNDS)")
	msgs := fs.String("msgs", "1000 2000 3000", "messages per run at c = 1, 10, 100 (MSGS)")
	idle := fs.Int("idle", 10000, "idle milter sessions for the memory figure (IDLE)")
	baseline := fs.String("baseline", "", "an older sluice binary, measured as "+baselineTarget+" (BASELINE)")
	only := fs.String("targets", "", "only these targets, space-separated (TARGETS; postfix-alone and sluice-connect among them)")
	if err := fs.Parse(args); err != nil {
		return settings{}, err
	}
	if fs.NArg() != 0 {
		return settings{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	q := *quick || getenv("QUICK") == "1"
	s := settings{rounds: 3, idle: 10000}
	m := "1000 2000 3000"
	if q {
		s.rounds, s.idle, m = 1, 2000, "100 300 500"
	}
	var err error
	switch {
	case set["rounds"]:
		s.rounds = *rounds
	case !q && getenv("ROUNDS") != "":
		if s.rounds, err = strconv.Atoi(getenv("ROUNDS")); err != nil {
			return s, fmt.Errorf("ROUNDS=%q is not a number", getenv("ROUNDS"))
		}
	}
	switch {
	case set["idle"]:
		s.idle = *idle
	case getenv("IDLE") != "":
		if s.idle, err = strconv.Atoi(getenv("IDLE")); err != nil {
			return s, fmt.Errorf("IDLE=%q is not a number", getenv("IDLE"))
		}
	}
	switch {
	case set["msgs"]:
		m = *msgs
	case getenv("MSGS") != "":
		m = getenv("MSGS")
	}
	if s.msgs, err = parseCounts(m); err != nil {
		return s, err
	}
	s.baseline = getenv("BASELINE")
	if set["baseline"] {
		s.baseline = *baseline
	}
	if s.baseline != "" {
		if st, err := os.Stat(s.baseline); err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
			return s, fmt.Errorf("BASELINE=%s is not an executable file", s.baseline)
		}
		if s.baseline, err = filepath.Abs(s.baseline); err != nil {
			return s, fmt.Errorf("BASELINE: %w", err)
		}
	}
	t := getenv("TARGETS")
	if set["targets"] {
		t = *only
	}
	if t != "" {
		if s.only, err = parseTargets(t); err != nil {
			return s, err
		}
	}
	switch {
	case s.rounds < 1:
		return s, errors.New("the rounds must be at least 1")
	case s.idle < 1:
		return s, errors.New("the idle sessions must be at least 1")
	}
	return s, nil
}

// parseCounts parses MSGS: one positive count per c in concurrency.
func parseCounts(v string) ([]int, error) {
	f := strings.Fields(v)
	if len(f) != len(concurrency) {
		return nil, fmt.Errorf("MSGS needs one count per c (%s), got %q", joinInts(concurrency), v)
	}
	out := make([]int, len(f))
	for i, s := range f {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("MSGS: %q is not a positive count", s)
		}
		out[i] = n
	}
	return out, nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, " ")
}

const usage = `usage: milterbench [-quick] [-rounds n] [-msgs "a b c"] [-idle n] [-baseline bin] [-targets "t ..."]

bench/milter.sh's driver (see its header, or "go doc ./bench/milterbench"):
Postfix alone, with sluice's milter (CONNECT only, all events), with
libmilter milters and with a floor milter, side by side, every delivery
checked. As root, from the repository's root. The environment's QUICK=1,
ROUNDS, MSGS, IDLE, BASELINE and TARGETS set the same as the flags, which win.

`

func realMain(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return daemons.Main("milterbench", args, getenv, stdout, stderr, parseSettings, run)
}
