package cli

// The schedules of the differential fuzzer (mux_fuzz_test.go): an option
// set, a worker behaviour, and phases of staggered concurrent requests,
// each followed by probes at a quiet point and perhaps a signal, all drawn
// from one seed.

import (
	"fmt"
	"io"
	"math/rand/v2"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// fuzzGap is the time between two requests of a phase: long enough that
// both multiplexors see them in the same order, and each one's outcome
// (a worker, the queue, "no free workers") does not depend on scheduling.
// Two requests must not end together either, nor when a slot is brought
// up again (-w 1, a second after a reap: half a gap after a request
// starts): the durations of a worker's work differ by no multiple of the
// gap, and end at least 50 ms from a multiple of it, and from half of
// one ("stderr" and "tag" 100 ms, "slow" requests and "sleep 300" 300 ms,
// "sleep 750" and "sleep 1050"). Phases start 100 ms into a second of the
// clock, so that no request comes within 100 ms of a second's start: the
// reference counts -W in whole seconds.
const fuzzGap = 400 * time.Millisecond

// fuzzSchedule is one run of both multiplexors.
type fuzzSchedule struct {
	seed uint64
	// args are the multiplexor's flags; WORKER and SPOOL are replaced by
	// the worker wrapper and the spool directory.
	args []string
	// workerEnv is the fake worker's behaviour (FAKEWORKER_* settings),
	// set by a wrapper script both multiplexors run as their filter.
	workerEnv []string
	min, max  int // after the reference's clamps
	ro        bool
	notify    bool
	phases    []fuzzPhase
}

// fuzzPhase is requests sent fuzzGap apart on concurrent connections,
// then probes once the pool is quiet, then perhaps a signal.
type fuzzPhase struct {
	reqs   []fuzzReq
	probes []string
	signal syscall.Signal // 0 for none
}

// fuzzReq is one client connection.
type fuzzReq struct {
	data string // written as is
	ro   bool   // on the restricted (-a) socket
	// halfClose shuts the connection's write side after data.
	halfClose bool
	// state is set for the built-in commands whose reply depends on the
	// pool's state at that instant: mid-phase it is only checked for the
	// status invariants, not compared.
	state bool
}

// line is the command the multiplexor reads from r: the reference drops
// the last byte of a request as its newline, even when the client
// half-closed without one.
func (r fuzzReq) line() string {
	if r.halfClose && r.data != "" {
		return r.data[:len(r.data)-1]
	}
	return strings.TrimSuffix(r.data, "\n")
}

func (r fuzzReq) String() string {
	s := fmt.Sprintf("%q", trunc(r.data, 60))
	if r.ro {
		s += " (restricted)"
	}
	if r.halfClose {
		s += " (half-closed)"
	}
	return s
}

func trunc(s string, n int) string {
	if len(s) > n {
		return fmt.Sprintf("%s...(%d bytes)", s[:n], len(s))
	}
	return s
}

// stateCommands are the built-ins whose reply is the pool's state.
var stateCommands = []string{"status", "free", "msgs", "workers", "busyworkers", "slaves", "busyslaves",
	"histo", "load", "load-relayok", "load-senderok", "load-recipok", "hload", "hload-scan", "hload-recipok",
	"load1 10", "load1 600", "workerinfo 0", "slaveinfo 1"}

// fixedCommands are requests whose reply never depends on the pool's
// state (built-ins, malformed lines, what the restricted socket refuses).
// `autoscale` is not among them: sluice answers it as 3.7.1 does, 3.3
// hands it to a worker (internal/mux/differences.go, "autoscale").
var fixedCommands = []string{"help", "version", "tick", "foo_no_such_command", "workerinfo 99", "workerinfo -1",
	"workerinfo x", "slaveinfo", "load1 9", "load1 601", "load1 x", "load1", "status ", " status",
	"STATUS", "free\r", "status\r\r", "workerinfo ", "slaveinfo ", "load1 ", "load1  12"}

// workerCommands are handed to a worker; the fake worker acts on them
// (see internal/pool/testdata/fakeworker). rawstatus and barstatus are
// md-mx-ctrl's words, not the multiplexor's: they reach a worker too.
var workerCommands = []string{"scan Q%d /tmp", "scan Q%d slow", "relayok 192.0.2.%d host 25 127.0.0.1 25 NOQUEUE",
	"senderok <s%d@example.com> 192.0.2.1 host helo", "recipok <r%d@example.com> <s@x> 192.0.2.1 host first helo",
	"recipok <r%d@one.example> <s@x> 192.0.2.1 host first helo slow", "sleep 300", "sleep 750", "sleep 1050",
	"sleep 300", "die", "partial", "two", "long 4094", "long 5000", "flood 50000", "garbage",
	"rawstatus", "barstatus", "hello %d", "stderr oops%0Aagain", "scan ", "scan Q%d", "relayok ", "recipok <r@one.example>"}

// newFuzzSchedule draws one schedule from seed.
func newFuzzSchedule(seed uint64) *fuzzSchedule {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	s := &fuzzSchedule{seed: seed}
	add := func(a ...string) { s.args = append(s.args, a...) }
	add("-f", "WORKER", "-t", "SPOOL/stats", "-u", "-w", "1", "-b", "10")
	add("-m", fmt.Sprint(r.IntN(3)), "-x", fmt.Sprint(1+r.IntN(4)))
	if r.IntN(3) == 0 {
		add("-r", fmt.Sprint(1+r.IntN(4)))
	}
	if r.IntN(3) == 0 {
		add("-i", "10")
	}
	if r.IntN(2) == 0 {
		add("-q", fmt.Sprint(r.IntN(4)), "-Q", fmt.Sprint(1+r.IntN(3)))
	}
	if r.IntN(4) == 0 {
		add("-W", fmt.Sprint(r.IntN(2)))
	}
	if r.IntN(4) == 0 {
		add("-y", "1")
	}
	if r.IntN(4) == 0 {
		add("-M", "2000000", "-R", "1000000")
	}
	if r.IntN(3) == 0 {
		add("-Z")
	}
	if s.notify = r.IntN(2) == 0; s.notify {
		add("-O", "SPOOL/notify.sock")
	}
	if s.ro = r.IntN(2) == 0; s.ro {
		add("-a", "SPOOL/ro.sock")
	}
	if r.IntN(5) == 0 {
		// It exits half a gap after its last answer: a request the
		// multiplexor hands it meanwhile (one queued is handed at once)
		// is in its pipe by then on both sides, and it exits with it
		// unanswered, away from other events (fuzzGap).
		s.workerEnv = append(s.workerEnv, fmt.Sprintf("FAKEWORKER_EXIT_AFTER=%d", 1+r.IntN(4)),
			fmt.Sprintf("FAKEWORKER_EXIT_AFTER_MS=%d", fuzzGap/2/time.Millisecond))
	}
	flags := strings.Fields(strings.NewReplacer("WORKER", "/w", "SPOOL", "/s").Replace(s.argString()))
	o, err := parseMuxArgs("sluice mux", flags, io.Discard)
	if err != nil {
		panic(fmt.Sprintf("schedule %d: flags %q: %v", seed, s.args, err))
	}
	s.min, s.max = o.MinWorkers, o.MaxWorkers
	queue := o.Queue
	for range 2 + r.IntN(4) {
		var ph fuzzPhase
		for range 1 + r.IntN(s.max+queue+2) {
			ph.reqs = append(ph.reqs, s.randomReq(r))
		}
		ph.probes = []string{"status", "free", "msgs", "workers", "busyworkers", "histo", "load", "hload-recipok", "load1 600"}
		for i := range s.max {
			ph.probes = append(ph.probes, fmt.Sprintf("workerinfo %d", i))
		}
		switch n := r.IntN(24); {
		case n < 5:
			ph.signal = syscall.SIGINT
		case n < 9:
			ph.signal = syscall.SIGHUP
		}
		s.phases = append(s.phases, ph)
	}
	// Sometimes a last phase ends with a signal the reference does not
	// handle, which kills it.
	if r.IntN(12) == 0 {
		s.phases[len(s.phases)-1].signal = syscall.SIGUSR1
	}
	return s
}

// randomReq draws one request. A worker that hangs (until -b, 10 s) is
// rare: it makes a schedule slow.
func (s *fuzzSchedule) randomReq(r *rand.Rand) fuzzReq {
	var q fuzzReq
	switch n := r.IntN(100); {
	case n < 55:
		q.data = workerCommands[r.IntN(len(workerCommands))]
		if strings.Contains(q.data, "%d") {
			q.data = fmt.Sprintf(q.data, r.IntN(100))
		}
		if r.IntN(40) == 0 {
			q.data = "hang"
		}
		if strings.Contains(s.argString(), "-Z") && r.IntN(8) == 0 {
			q.data = fmt.Sprintf("tag phase%%20%d", r.IntN(10))
		}
		q.data += "\n"
	case n < 70:
		q.data = stateCommands[r.IntN(len(stateCommands))] + "\n"
		q.state = true
	case n < 85:
		q.data = fixedCommands[r.IntN(len(fixedCommands))] + "\n"
	case n < 88:
		q.data = "reread\n"
	default:
		q.data = malformed(r)
	}
	if s.ro && r.IntN(4) == 0 {
		q.ro = true
	}
	if r.IntN(10) == 0 && strings.HasSuffix(q.data, "\n") {
		q.data = strings.TrimSuffix(q.data, "\n")
		q.halfClose = true
	}
	return q
}

// malformed draws a request no client should send.
func malformed(r *rand.Rand) string {
	switch r.IntN(9) {
	case 0:
		return "\n"
	case 1:
		return "\r\n"
	case 2:
		return strings.Repeat("a", 4094) + "\n"
	case 3:
		return strings.Repeat("a", 4095) + "\n"
	case 4:
		return strings.Repeat("b", 9000) + "\n"
	case 5:
		return "x\x00y\n"
	case 6:
		return "free\nmsgs\n"
	case 7:
		return "\xff\xfe scan\n"
	default:
		return "scan Q1 /tmp\r\r\n"
	}
}

func (s *fuzzSchedule) argString() string { return strings.Join(s.args, " ") }

func (s *fuzzSchedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %s", s.seed, s.argString())
	if len(s.workerEnv) > 0 {
		fmt.Fprintf(&b, " [worker %s]", strings.Join(s.workerEnv, " "))
	}
	for i, ph := range s.phases {
		fmt.Fprintf(&b, "\n  phase %d:", i)
		for _, q := range ph.reqs {
			fmt.Fprintf(&b, " %s", q)
		}
		if ph.signal != 0 {
			fmt.Fprintf(&b, " then %v", ph.signal)
		}
	}
	return b.String()
}

var (
	fuzzUptimeRe = regexp.MustCompile(`(?m) \d+\n$`)
	// The load commands' fields that hold times (average milliseconds,
	// uptime) depend on scheduling.
	// So do load's counts over the last 10 s (the two sides' timelines
	// drift by a second or so; load1 is probed over 600 s) and hload's
	// elapsed seconds.
	fuzzLoadMS = map[string][]int{"load1": {2, 5, 8, 11, 20}, "load": {0, 4, 8, 9, 10, 11, 12, 16, 28}, "hload": {8, 9, 10, 11, 12, 13, 14, 15}}
)

// fuzzNormalize hides what legitimately differs between two runs of the
// same request: pids, seconds, milliseconds.
func fuzzNormalize(req, reply string) string {
	reply = featNormalize(reply)
	word, _, _ := strings.Cut(strings.TrimSpace(req), " ")
	word, _, _ = strings.Cut(word, "-")
	if word == "status" {
		reply = fuzzUptimeRe.ReplaceAllString(reply, " UPTIME\n")
	}
	if ms := fuzzLoadMS[word]; len(ms) > 0 {
		if f := strings.Fields(reply); len(f) > 12 {
			for _, i := range ms {
				if i < len(f) {
					f[i] = "MS"
				}
			}
			reply = strings.Join(f, " ") + "\n"
		}
	}
	return reply
}
