// Command policybench is bench/policy.sh's driver: sluice's policy door
// against postfwd2 and policyd-rate-limit, side by side, with the same
// load and the same rule. bench/policy.sh checks for root, installs the
// two peers' packages and disables their system services, then runs it
// from the repository's root.
//
// The rule, for all three: each sender may send 1000 messages per 60 s,
// counted once per message at END-OF-MESSAGE; RCPT requests answer DUNNO.
// The load (bench/policyload: persistent TCP connections speaking the
// policy protocol as smtpd does, ~900-byte Postfix 3.7 requests, 1,000
// clients and 1,000 senders, one RCPT request per recipient then one
// END-OF-MESSAGE request per message) stays far below that limit, so
// almost nothing is refused: it measures the decision path. Before the
// timed runs a probe sends 1001 one-recipient messages from one sender to
// each server and prints how many were refused (1 expected), so a server
// whose rule is not active shows up as such.
//
// Runs at c = 1, 8 and 64 connections, interleaved: in each round, for
// each c, every server gets one run, and which server goes first rotates
// from round to round. It prints every run (with the CPU time the server
// used per request, from /proc/PID/stat: all of postfwd2's session), a
// table of medians over the rounds with the slowest and fastest round's
// rate beside each, the goals at c=64, the spread of each ratio
// over the rounds, and one "policy ratio sluice/<server> c=<c>: X.XX" line
// per server and c (ratio of median requests per second), ending with
//
//	policy ratio sluice/postfwd c=64: X.XX
//
// What the two peers count, and how they are set up:
//
//   - postfwd2 (Perl, Net::Server prefork): rate(sender/1000/60/...) in a
//     rule matching protocol_state END-OF-MESSAGE (postfwd.cf here), so the
//     same meaning as sluice's rule (an anchored 60 s window rather than
//     sluice's exact sliding one). Counters live in the separate
//     postfwd2::cache process, which every child asks once per
//     END-OF-MESSAGE request. It logs through Sys::Syslog only and dies
//     without /dev/log, so its perl loads a stand-in (Syslog.pm here) that
//     appends to a file; its rule file is given by an absolute path (it
//     chdirs to / first); its 72 children are pre-forked and kept (one per
//     persistent connection); its request cache is off unless
//     POSTFWD_CACHE says otherwise.
//   - policyd-rate-limit 1.0.1 (Python, one select() loop, SQLite): counts
//     only at protocol_state RCPT, one row per RCPT request, i.e. it limits
//     recipients, not messages, and answers END-OF-MESSAGE with DUNNO
//     without looking at it. So under this load it counts about twice as
//     many events as the others, and its probe refuses at RCPT. Its
//     database is ":memory:" (no fsync per request); it is started as its
//     own user (with ":memory:" it dies creating the database's directory
//     when started as root), debug off, and delay_to_close 2 s (its
//     closed-connection table slows every later run down for
//     delay_to_close).
//
// Settings, from the environment as bench/policy.sh always took them, or
// from the flags, which win:
//
//	QUICK=1          -quick           1 s per run, 1 round
//	DURATION=5s      -duration        the measured time of each run
//	ROUNDS=3         -rounds          rounds
//	POSTFWD_CACHE=0  -postfwd-cache   postfwd2's request cache timeout in s (0: off)
//	BASELINE=        -baseline        another sluice binary, measured beside this one
//
// More servers run beside the three: the floor (bench/policyfloor, the
// least a policy server can do on the same socket: read up to the empty
// line, write a fixed action=DUNNO; it has no rule, so it is not probed),
// the C floor (cfloor: bench/protofloor.c in its policy mode, the same
// answer from one thread on epoll, built with cc; not probed either) and,
// with BASELINE, an older sluice binary started with the same
// configuration, so that a change is measured before and after in one run.
// Their ratio lines ("policy ratio sluice/floor c=N", "policy ratio
// sluice/baseline c=N") come before those against the peers, and the goals
// gain "sluice/floor at c=64 (>= 0.85)".
//
// Last before the ratio lines comes what each request costs: per server
// and c, the server's CPU time and context switches per request (medians
// over the rounds, with the smallest and largest round's value), and one
// "policy cpu sluice/cfloor c=<c>: X.XX (<= 1.5: met|MISSED)" line per c,
// the ratio of the median CPU times per request (issue 44's criterion at
// c=1 and c=64).
//
// It must run as root (the daemons run as their own users) from the
// repository's root, with postfwd and policyd-rate-limit installed. Each
// server is a private instance on a free loopback port with its files in
// a private directory below /tmp; a watchdog process stops them (postfwd2:
// its whole session) and removes it if the driver is killed. The load
// generator and the servers share this machine's CPUs; nothing is pinned,
// so compare ratios across machines rather than absolute numbers.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"sluice/bench/internal/daemons"
)

func main() {
	daemons.RunWatchdogIfAsked()
	os.Exit(realMain(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// concurrency is the connections of the runs, in increasing order (the
// c=64 line against postfwd comes last).
var concurrency = []int{1, 8, 64}

// peers are the two policy servers sluice is compared with; the ratio
// lines against them end the report.
var peers = []string{"policyd-rate-limit", "postfwd"}

// settings are the run's knobs.
type settings struct {
	duration     string // as given, for policyload's -duration and the report
	rounds       int
	postfwdCache int
	baseline     string // another sluice binary to measure beside this one ("": none)
}

// targets are the servers of a run, in their first round's order: sluice,
// the floor (bench/policyfloor), the C floor (bench/protofloor.c), the
// baseline if there is one, and the peers.
func (s settings) targets() []string {
	t := []string{"sluice", "floor", "cfloor"}
	if s.baseline != "" {
		t = append(t, "baseline")
	}
	return append(t, "postfwd", "policyd-rate-limit")
}

const usage = `usage: policybench [-quick] [-duration d] [-rounds n] [-postfwd-cache s] [-baseline sluice]

bench/policy.sh's driver (see its header, or "go doc ./bench/policybench"):
sluice's policy door, postfwd2 and policyd-rate-limit side by side, with the
same rule and load. As root, from the repository's root. The environment's
QUICK=1 (1 s per run, 1 round: DURATION and ROUNDS are then ignored),
DURATION, ROUNDS, POSTFWD_CACHE and BASELINE set the same as the flags,
which win.

`

// parseSettings reads the flags and the environment's knobs (a flag
// wins over its variable), as lib.sh's run_length read them.
func parseSettings(args []string, getenv func(string) string, stderr io.Writer) (settings, error) {
	fs := flag.NewFlagSet("policybench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	quick := fs.Bool("quick", false, "a short run: 1 s per run, 1 round (QUICK=1)")
	duration := fs.String("duration", "5s", "the measured time of each run (DURATION)")
	nRounds := fs.Int("rounds", 3, "rounds (ROUNDS)")
	cache := fs.Int("postfwd-cache", 0, "postfwd2's request cache timeout in seconds, 0 for off (POSTFWD_CACHE)")
	baseline := fs.String("baseline", "", "another sluice binary to measure beside this one, with the same rule (BASELINE)")
	if err := fs.Parse(args); err != nil {
		return settings{}, err
	}
	if fs.NArg() != 0 {
		return settings{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	s := settings{duration: "5s", rounds: 3}
	q := *quick || getenv("QUICK") == "1"
	if q {
		s.duration, s.rounds = "1s", 1
	}
	var err error
	switch {
	case set["duration"]:
		s.duration = *duration
	case !q && getenv("DURATION") != "":
		s.duration = getenv("DURATION")
	}
	switch {
	case set["rounds"]:
		s.rounds = *nRounds
	case !q && getenv("ROUNDS") != "":
		if s.rounds, err = strconv.Atoi(getenv("ROUNDS")); err != nil {
			return s, fmt.Errorf("ROUNDS=%q is not a number", getenv("ROUNDS"))
		}
	}
	switch {
	case set["postfwd-cache"]:
		s.postfwdCache = *cache
	case getenv("POSTFWD_CACHE") != "":
		if s.postfwdCache, err = strconv.Atoi(getenv("POSTFWD_CACHE")); err != nil {
			return s, fmt.Errorf("POSTFWD_CACHE=%q is not a number", getenv("POSTFWD_CACHE"))
		}
	}
	s.baseline = getenv("BASELINE")
	if set["baseline"] {
		s.baseline = *baseline
	}
	if s.baseline != "" {
		if fi, err := os.Stat(s.baseline); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return s, fmt.Errorf("the baseline %q is not an executable file", s.baseline)
		}
	}
	if d, err := time.ParseDuration(s.duration); err != nil || d <= 0 {
		return s, fmt.Errorf("the duration %q is not a positive duration", s.duration)
	}
	switch {
	case s.rounds < 1:
		return s, errors.New("the rounds must be at least 1")
	case s.postfwdCache < 0:
		return s, errors.New("the postfwd cache timeout must not be negative")
	}
	return s, nil
}

func realMain(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return daemons.Main("policybench", args, getenv, stdout, stderr, parseSettings, run)
}
