package cli

// The differential fuzzer: sluice mux and the reference
// (/usr/bin/mimedefang-multiplexor) run side by side through the same
// random schedule (mux_fuzz_schedule_test.go) and must give the same
// replies, the same state at every quiet point, the same notification
// stream and the same stats-file records, modulo times and pids. A
// difference the project keeps on purpose is listed in
// internal/mux/differences.go; the fuzzer tolerates only what is listed
// there, by its id. A schedule whose run differs runs again (up to
// fuzzAttempts times): on a loaded machine its timing margins can fail
// on either side (see fuzzCompare).
//
// By default a handful of fixed seeds run (about a minute). FUZZTIME=10m
// runs new seeds for that long; FUZZSEED=n runs seed n alone (to replay a
// finding), or with FUZZTIME, seeds from n on.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/internal/mux"
)

// fuzzShortSeeds are the schedules of a normal run.
var fuzzShortSeeds = []uint64{11, 12, 14, 21}

func TestMuxDifferentialFuzz(t *testing.T) {
	if testing.Short() {
		t.Skip("runs multiplexor pairs through schedules for about a minute")
	}
	var budget time.Duration
	if v := os.Getenv("FUZZTIME"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("FUZZTIME=%q: %v", v, err)
		}
		budget = d
	}
	seeds := fuzzShortSeeds
	var first uint64 = 1000
	if v := os.Getenv("FUZZSEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("FUZZSEED=%q: %v", v, err)
		}
		seeds, first = []uint64{n}, n
	}
	long := budget > 0
	start := time.Now()
	var mu sync.Mutex
	compared, differing := 0, 0
	runOne := func(t *testing.T, seed uint64) {
		s := newFuzzSchedule(seed)
		n := fuzzCompare(t, s)
		mu.Lock()
		compared++
		if n > 0 {
			differing++
		}
		mu.Unlock()
	}
	if !long {
		t.Run("seeds", func(t *testing.T) {
			for _, seed := range seeds {
				t.Run(fmt.Sprint(seed), func(t *testing.T) {
					t.Parallel()
					runOne(t, seed)
				})
			}
		})
	} else {
		// Two schedules at a time, until the budget is spent.
		next := first
		for time.Since(start) < budget {
			t.Run("batch", func(t *testing.T) {
				for range 2 {
					seed := next
					next++
					t.Run(fmt.Sprint(seed), func(t *testing.T) {
						t.Parallel()
						runOne(t, seed)
					})
				}
			})
		}
	}
	t.Logf("%d schedules compared with the reference in %v, %d with differences", compared, time.Since(start).Round(time.Second), differing)
}

// fuzzOutcome is what one multiplexor did through a schedule, normalized.
type fuzzOutcome struct {
	replies [][]string // per phase, per request
	probes  [][]string // per phase
	notes   []string
	stats   []string
	died    bool // it ended by the schedule's last signal
	// problems are broken invariants (they fail the test on either side).
	problems []string
	// late is the most a request sender woke after its planned time.
	late time.Duration
}

// fuzzAttempts is how many times a schedule runs before its differences
// count: see fuzzCompare.
const fuzzAttempts = 3

// fuzzCompare runs s on both multiplexors and reports every difference;
// it returns how many it found.
//
// A schedule keeps its requests' outcomes apart by margins of 50 to 100
// ms (fuzzGap). On a loaded machine (load average 10 and more on 2
// cores) a worker's start or a wake-up can take longer than that on
// either side, and the two sides then legitimately do different things
// (a request finds a worker still busy on one side and not on the
// other). So a schedule whose outcomes differ runs again on a fresh
// pair, up to fuzzAttempts times in all, and fails only when every run
// differs: a difference of sluice's own shows in every run, one of
// timing in few. Each discarded run is logged with its differences and
// how late the test's own request senders woke (a measure of the load).
// Broken invariants (problems) fail at once.
func fuzzCompare(t *testing.T, s *fuzzSchedule) int {
	t.Logf("schedule %v", s)
	for attempt := 1; ; attempt++ {
		n, diffs, late := fuzzAttempt(t, s)
		if n > 0 || len(diffs) == 0 {
			return n
		}
		if attempt == fuzzAttempts {
			for _, d := range diffs {
				t.Errorf("seed %d: %s", s.seed, d)
			}
			return len(diffs)
		}
		t.Logf("seed %d: run %d of %d differs (request senders woke up to %v late); running it again:\n%s",
			s.seed, attempt, fuzzAttempts, late, strings.Join(diffs, "\n"))
	}
}

// fuzzAttempt runs s once on a fresh pair. It reports sluice's broken
// invariants (their count is n) and returns the differences from the
// reference, and how late the request senders woke on either side.
func fuzzAttempt(t *testing.T, s *fuzzSchedule) (n int, diffs []string, late time.Duration) {
	wrapper := fuzzWrapper(t, s.workerEnv)
	args := slices.Clone(s.args)
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "WORKER", wrapper)
	}
	sl, ref := featPair(t, args, nil)
	var got, want *fuzzOutcome
	var wg sync.WaitGroup
	wg.Go(func() { got = fuzzRun(t, s, sl) })
	if ref != nil {
		wg.Go(func() { want = fuzzRun(t, s, ref) })
	}
	wg.Wait()
	for _, p := range got.problems {
		n++
		t.Errorf("seed %d: sluice: %s", s.seed, p)
	}
	if ref == nil {
		return n, nil, got.late
	}
	for _, p := range want.problems {
		t.Logf("seed %d: reference: %s (its own; not a difference)", s.seed, p)
	}
	late = max(got.late, want.late)
	diffs = fuzzDiffs(s, got, want, fuzzStrict)
	if len(diffs) > 0 && len(fuzzDiffs(s, got, want, fuzzAnySlot)) == 0 {
		// The reference reaps workers that exit together in the order its
		// wait3 happens to see them, which decides which stopped slot is
		// started next: the same events on other slot numbers.
		t.Logf("seed %d: same events on other slot numbers (the reference's reap order is a race):\n%s", s.seed, strings.Join(diffs, "\n"))
		return n, nil, late
	}
	if len(diffs) > 0 && len(fuzzDiffs(s, got, want, fuzzBringUpMoves)) == 0 {
		t.Logf("seed %d: a bring-up to -m on the other side of a request's end (timers a second apart, late under load; see fuzzBringUpBlocks):\n%s",
			s.seed, strings.Join(diffs, "\n"))
		return n, nil, late
	}
	return n, diffs, late
}

// How much fuzzDiffs lets through.
const (
	fuzzStrict = iota
	// fuzzAnySlot ignores which slot did what: slot numbers are taken
	// out of stats records, notifications and probes, and the slots'
	// lines and workerinfo replies are compared as sets.
	fuzzAnySlot
	// fuzzBringUpMoves is fuzzAnySlot, and a bring-up to -m may come on
	// either side of a request's end (fuzzBringUpBlocks).
	fuzzBringUpMoves
)

// fuzzDiffs lists the differences between two outcomes, at a level of
// relaxation (fuzzStrict, fuzzAnySlot, fuzzBringUpMoves).
func fuzzDiffs(s *fuzzSchedule, got, want *fuzzOutcome, level int) []string {
	relaxed := level >= fuzzAnySlot
	var diffs []string
	add := func(format string, a ...any) { diffs = append(diffs, fmt.Sprintf(format, a...)) }
	for pi, ph := range s.phases {
		for i, q := range ph.reqs {
			if g, w := got.replies[pi][i], want.replies[pi][i]; g != w && !fuzzTolerated(q, g, w) {
				add("phase %d request %s: sluice %q, reference %q", pi, q, trunc(g, 300), trunc(w, 300))
			}
		}
		if pi >= len(got.probes) || pi >= len(want.probes) {
			continue
		}
		gp, wp := got.probes[pi], want.probes[pi]
		if relaxed {
			gp, wp = fuzzRelaxProbes(ph.probes, gp), fuzzRelaxProbes(ph.probes, wp)
		}
		for i, q := range ph.probes {
			if i < len(gp) && i < len(wp) && gp[i] != wp[i] {
				add("phase %d probe %q: sluice %q, reference %q", pi, q, trunc(gp[i], 300), trunc(wp[i], 300))
			}
		}
	}
	gn, wn, gs, ws := got.notes, want.notes, got.stats, want.stats
	if got.died != want.died {
		if sig := s.phases[len(s.phases)-1].signal; !got.died && sig == syscall.SIGUSR1 && fuzzListed("unhandled-signals") {
			// sluice lives on, and reaps its workers at the end.
			gs = fuzzTrimReaps(gs, len(ws))
		} else {
			add("after %v: sluice died %v, reference died %v", sig, got.died, want.died)
		}
	}
	if relaxed {
		gn, wn = fuzzRelaxLines(gn, fuzzNoteSlot), fuzzRelaxLines(wn, fuzzNoteSlot)
		gs, ws = fuzzRelaxLines(gs, fuzzStatsSlot), fuzzRelaxLines(ws, fuzzStatsSlot)
	}
	if level >= fuzzBringUpMoves {
		gn = fuzzBringUpBlocks(gn, fuzzNoteBringUp, fuzzNoteEnd, fuzzHideFree)
		wn = fuzzBringUpBlocks(wn, fuzzNoteBringUp, fuzzNoteEnd, fuzzHideFree)
		gs = fuzzBringUpBlocks(gs, fuzzStatsBringUp, fuzzStatsEnd, fuzzHideStatsCounts)
		ws = fuzzBringUpBlocks(ws, fuzzStatsBringUp, fuzzStatsEnd, fuzzHideStatsCounts)
	}
	if !reflect.DeepEqual(gn, wn) {
		add("notifications differ:\n%s", fuzzDiff(gn, wn))
	}
	if !reflect.DeepEqual(gs, ws) {
		add("stats records differ:\n%s", fuzzDiff(gs, ws))
	}
	return diffs
}

var (
	fuzzNoteSlot    = regexp.MustCompile(`^S \d+ `)
	fuzzStatsSlot   = regexp.MustCompile(` worker=\d+ `)
	fuzzSlotLine    = regexp.MustCompile(`(?m)^\d+ `)
	fuzzInfoSlot    = regexp.MustCompile(`^Worker \d+\n`)
	fuzzInfoCounts  = regexp.MustCompile(`(?m)^(NumRequests |NumScans )\d+`)
	fuzzStoppedLast = regexp.MustCompile(`(?m)^(\d+ S) last=\w+`)
)

// fuzzRelaxLines takes slot numbers out of lines.
func fuzzRelaxLines(lines []string, re *regexp.Regexp) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = re.ReplaceAllStringFunc(l, func(m string) string {
			return regexp.MustCompile(`\d+`).ReplaceAllString(m, "N")
		})
	}
	return out
}

// fuzzRelaxProbes takes slot numbers out of a phase's probe replies:
// status letters and the lines of workers are sorted, and the workerinfo
// replies are compared as a set.
func fuzzRelaxProbes(probes, replies []string) []string {
	out := slices.Clone(replies)
	var infos []int
	for i, p := range probes {
		if i >= len(out) {
			break
		}
		switch {
		case p == "status":
			if f := strings.SplitN(out[i], " ", 2); len(f) == 2 {
				b := []byte(f[0])
				slices.Sort(b)
				out[i] = string(b) + " " + f[1]
			}
		case p == "workers" || p == "busyworkers":
			// A stopped slot keeps the last command kind of its last
			// process, which depends on which slot was started again.
			relaxed := fuzzStoppedLast.ReplaceAllString(out[i], "$1")
			lines := strings.Split(fuzzSlotLine.ReplaceAllString(relaxed, "N "), "\n")
			slices.Sort(lines)
			out[i] = strings.Join(lines, "\n")
		case strings.HasPrefix(p, "workerinfo "):
			out[i] = fuzzInfoSlot.ReplaceAllString(out[i], "Worker N\n")
			if strings.Contains(out[i], "\nState Stopped\n") {
				// A stopped slot keeps the counts of its last process,
				// which depend on which slot was started again.
				out[i] = fuzzInfoCounts.ReplaceAllString(out[i], "${1}N")
			}
			infos = append(infos, i)
		}
	}
	sorted := make([]string, len(infos))
	for j, i := range infos {
		sorted[j] = out[i]
	}
	slices.Sort(sorted)
	for j, i := range infos {
		out[i] = sorted[j]
	}
	return out
}

// fuzzTolerated reports whether two replies to q differ only by the
// reference's own race: a worker that writes half a line and exits is
// relayed, or, when the reference reaps it before reading, reported as an
// error (sluice, which gives a worker reaped while busy 1 s to deliver
// its output, always relays it).
func fuzzTolerated(q fuzzReq, got, want string) bool {
	return strings.HasPrefix(q.data, "partial") && got == "part" && want == "error: Error talking to worker process\n"
}

// fuzzListed is true for the id of a deliberate difference
// (mux.Differences); an id that is not listed panics, so that the
// fuzzer tolerates nothing the documentation does not say.
func fuzzListed(id string) bool {
	if _, ok := mux.LookupDifference(id); !ok {
		panic("the fuzzer tolerates an unlisted difference: " + id)
	}
	return true
}

// fuzzTrimReaps drops the ReapWorker records after the first n.
func fuzzTrimReaps(stats []string, n int) []string {
	if len(stats) <= n {
		return stats
	}
	for _, l := range stats[n:] {
		if !strings.Contains(l, " ReapWorker ") {
			return stats
		}
	}
	return stats[:n]
}

// fuzzDiff shows two line sequences side by side from their first
// difference.
func fuzzDiff(got, want []string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  identical up to line %d of %d (sluice) / %d (reference)\n", i, len(got), len(want))
	from, to := max(i-3, 0), i+12
	if len(got) < 40 && len(want) < 40 {
		from, to = 0, 40
	}
	for j := from; j < to && (j < len(got) || j < len(want)); j++ {
		g, w := "", ""
		if j < len(got) {
			g = got[j]
		}
		if j < len(want) {
			w = want[j]
		}
		mark := " "
		if g != w {
			mark = "!"
		}
		fmt.Fprintf(&b, "  %s %-70s | %s\n", mark, trunc(g, 70), trunc(w, 70))
	}
	return b.String()
}

// fuzzWrapper writes a filter program that runs the fake worker with env
// (a shell script both multiplexors can exec, readable by the -U user).
func fuzzWrapper(t *testing.T, env []string) string {
	t.Helper()
	_, worker := muxBinaries(t)
	dir, err := os.MkdirTemp("", "sluice-mux-fuzz")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "worker")
	// What a worker takes ends at its own distance from a multiple of
	// fuzzGap ("stderr" takes 100 ms): see fuzzGap.
	env = append([]string{"FAKEWORKER_TAG_MS=100", "FAKEWORKER_SLOW_MS=300"}, env...)
	script := fmt.Sprintf("#!/bin/sh\n%s exec %s \"$@\"\n", strings.Join(env, " "), worker)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// fuzzRun plays s on d.
func fuzzRun(t *testing.T, s *fuzzSchedule, d *featDaemon) *fuzzOutcome {
	o := &fuzzOutcome{}
	var l *featListener
	if s.notify {
		l = featListen(t, d.spool+"/notify.sock", "?*")
	}
	fuzzSettle(t, s, d, o, "start")
	// What the pool did before it was first quiet depends on when the
	// listener connected: the comparison starts here.
	base := 0
	if l != nil {
		l.mu.Lock()
		base = len(l.lines)
		l.mu.Unlock()
	}
	for pi, ph := range s.phases {
		now := time.Now()
		time.Sleep(now.Truncate(time.Second).Add(time.Second + 100*time.Millisecond).Sub(now))
		replies := make([]string, len(ph.reqs))
		var wg sync.WaitGroup
		var lateMu sync.Mutex
		start := time.Now()
		for i, q := range ph.reqs {
			wg.Go(func() {
				plan := time.Duration(i) * fuzzGap
				time.Sleep(plan)
				lateMu.Lock()
				o.late = max(o.late, time.Since(start)-plan)
				lateMu.Unlock()
				replies[i] = fuzzSend(d, q)
			})
		}
		wg.Wait()
		for i, q := range ph.reqs {
			if q.state && !q.ro {
				if strings.HasPrefix(q.data, "status\n") {
					fuzzCheckStatus(s, replies[i], false, o, fmt.Sprintf("phase %d", pi))
				}
				replies[i] = "(the pool's state)"
				continue
			}
			replies[i] = fuzzNormalize(q.line(), replies[i])
		}
		o.replies = append(o.replies, replies)
		fuzzSettle(t, s, d, o, fmt.Sprintf("phase %d", pi))
		var probes []string
		for _, p := range ph.probes {
			r := fuzzSend(d, fuzzReq{data: p + "\n"})
			if p == "status" {
				fuzzCheckStatus(s, r, true, o, fmt.Sprintf("after phase %d", pi))
			}
			probes = append(probes, fuzzNormalize(p, r))
		}
		o.probes = append(o.probes, probes)
		if ph.signal == 0 {
			continue
		}
		if err := syscall.Kill(d.pid, ph.signal); err != nil {
			t.Errorf("%s: kill %v: %v", d.name, ph.signal, err)
		}
		if ph.signal == syscall.SIGUSR1 {
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && alive(d.pid); {
				time.Sleep(20 * time.Millisecond)
			}
			if o.died = !alive(d.pid); o.died {
				break
			}
		}
		// A reread (SIGINT) kills the idle workers: wait for the pool to
		// come back.
		fuzzSettle(t, s, d, o, fmt.Sprintf("%v after phase %d", ph.signal, pi))
	}
	if l != nil {
		for _, n := range l.close()[base:] {
			o.notes = append(o.notes, featNormalize(n))
		}
	}
	d.stop()
	b, err := os.ReadFile(d.spool + "/stats")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s: %v", d.name, err)
	}
	for line := range strings.SplitSeq(strings.TrimSuffix(string(b), "\n"), "\n") {
		if line != "" {
			o.stats = append(o.stats, featAgoRe.ReplaceAllString(featStamp.ReplaceAllString(line, "T "), "${1}N"))
		}
	}
	return o
}

// fuzzSend plays one connection and returns all the server sent; an I/O
// error is shown after it in brackets.
func fuzzSend(d *featDaemon, q fuzzReq) string {
	sock := d.main
	if q.ro {
		sock = d.spool + "/ro.sock"
	}
	var c net.Conn
	var err error
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(time.Millisecond) {
		if c, err = net.Dial("unix", sock); err == nil || !errors.Is(err, syscall.EAGAIN) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return fmt.Sprintf("<dial: %v>", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	_, werr := c.Write([]byte(q.data))
	if q.halfClose && werr == nil {
		_ = c.(*net.UnixConn).CloseWrite()
	}
	b, rerr := io.ReadAll(c)
	reply := string(b)
	if rerr != nil {
		reply += "<read error>"
	}
	return reply
}

// fuzzSettle waits until d's pool is quiet: nothing busy, killed or
// queued, at least -m workers running, and the same status for 1.5 s (longer than -w).
func fuzzSettle(t *testing.T, s *fuzzSchedule, d *featDaemon, o *fuzzOutcome, when string) {
	var last string
	var since time.Time
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		st := fuzzSend(d, fuzzReq{data: "status\n"})
		f := strings.Fields(st)
		if len(f) != 6 {
			o.problems = append(o.problems, fmt.Sprintf("%s: status %q", when, st))
			return
		}
		quiet := !strings.ContainsAny(f[0], "BK") && f[4] == "0" &&
			fuzzRunning(f[0]) >= s.min
		if !quiet || f[0] != last {
			last, since = f[0], time.Now()
			continue
		}
		if time.Since(since) >= 1500*time.Millisecond {
			return
		}
	}
	o.problems = append(o.problems, fmt.Sprintf("%s: never quiet (status %q)", when, last))
}

// fuzzRunning counts the running (idle, busy, killed) slots of a status.
func fuzzRunning(letters string) int {
	return len(letters) - strings.Count(letters, "S")
}

// fuzzCheckStatus checks a status reply's invariants: one letter per
// slot (-x of them); at a quiet point, at least -m running.
func fuzzCheckStatus(s *fuzzSchedule, st string, quiet bool, o *fuzzOutcome, when string) {
	f := strings.Fields(st)
	if len(f) != 6 || len(f[0]) != s.max || strings.Trim(f[0], "SIBK") != "" {
		o.problems = append(o.problems, fmt.Sprintf("%s: malformed status %q for -x %d", when, st, s.max))
		return
	}
	if quiet && fuzzRunning(f[0]) < s.min {
		o.problems = append(o.problems, fmt.Sprintf("%s: %d running, fewer than -m %d: %q", when, fuzzRunning(f[0]), s.min, st))
	}
}
