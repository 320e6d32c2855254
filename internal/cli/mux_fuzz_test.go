package cli

// The differential fuzzer: sluice mux and the reference
// (/usr/bin/mimedefang-multiplexor) run side by side through the same
// random schedule (mux_fuzz_schedule_test.go, played by
// mux_fuzz_run_test.go) and must give the same replies, the same state at
// every quiet point, the same notification stream and the same stats-file
// records, modulo times and pids. Any difference fails the schedule, but
// for those the fuzzer can explain: a difference the project keeps on
// purpose (mux.Differences, cited by its id), or a race of the
// reference's whose outcome the fuzzer has seen and names
// (fuzzTolerated). A run in which the fuzzer measured a cause that voids
// its timing (mux.FuzzCauses, cited by its id) is not judged, and the
// schedule played again (fuzzCompare). What used to differ from run to run
// by the order in which workers exit is made the same on both sides by
// the exit gate (mux_fuzz_gate_test.go).
//
// By default four fixed seeds run (about a minute). FUZZSEED=n runs seed
// n alone (to replay a finding: a failing schedule prints the command);
// FUZZCOUNT=k runs k seeds from FUZZSEED (default 1000) on, and
// FUZZTIME=10m runs seeds from there on for that long.

import (
	"fmt"
	"os"
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

// fuzzPlan is which seeds a run plays: the fixed seeds, count seeds from
// first on, or seeds from first on until the budget is spent.
type fuzzPlan struct {
	seeds  []uint64
	first  uint64
	count  int
	budget time.Duration
}

// fuzzPlanFromEnv reads FUZZSEED, FUZZCOUNT and FUZZTIME.
func fuzzPlanFromEnv(t *testing.T) fuzzPlan {
	pl := fuzzPlan{seeds: fuzzShortSeeds, first: 1000}
	if v := os.Getenv("FUZZTIME"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("FUZZTIME=%q: %v", v, err)
		}
		pl.budget = d
	}
	if v := os.Getenv("FUZZSEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("FUZZSEED=%q: %v", v, err)
		}
		pl.seeds, pl.first = []uint64{n}, n
	}
	if v := os.Getenv("FUZZCOUNT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("FUZZCOUNT=%q: want a count of seeds", v)
		}
		pl.count = n
	}
	return pl
}

// fuzzReplay is the command that plays seed again.
func fuzzReplay(seed uint64) string {
	return fmt.Sprintf("FUZZSEED=%d go test -race -count=1 -run 'TestMuxDifferentialFuzz$' ./internal/cli/", seed)
}

func TestMuxDifferentialFuzz(t *testing.T) {
	if testing.Short() {
		t.Skip("runs multiplexor pairs through schedules for about a minute")
	}
	pl := fuzzPlanFromEnv(t)
	start := time.Now()
	var mu sync.Mutex
	var played, failed []uint64
	runOne := func(t *testing.T, seed uint64) {
		t.Parallel()
		n := fuzzCompare(t, newFuzzSchedule(seed))
		mu.Lock()
		defer mu.Unlock()
		played = append(played, seed)
		if n > 0 {
			failed = append(failed, seed)
		}
	}
	switch {
	case pl.count > 0 || pl.budget > 0:
		// Two schedules at a time, from first on, count of them or until
		// the budget is spent.
		next := pl.first
		more := func() bool {
			if pl.count > 0 && next >= pl.first+uint64(pl.count) {
				return false
			}
			return pl.budget == 0 || time.Since(start) < pl.budget
		}
		for more() {
			t.Run("batch", func(t *testing.T) {
				for i := 0; i < 2 && more(); i++ {
					seed := next
					next++
					t.Run(fmt.Sprint(seed), func(t *testing.T) { runOne(t, seed) })
				}
			})
		}
	default:
		t.Run("seeds", func(t *testing.T) {
			for _, seed := range pl.seeds {
				t.Run(fmt.Sprint(seed), func(t *testing.T) { runOne(t, seed) })
			}
		})
	}
	slices.Sort(played)
	t.Logf("%d schedules compared with the reference in %v (seeds %v), %d failed %v",
		len(played), time.Since(start).Round(time.Second), fuzzSeedRanges(played), len(failed), failed)
}

// fuzzSeedRanges writes seeds as ranges (1000-1029).
func fuzzSeedRanges(seeds []uint64) string {
	var parts []string
	for i := 0; i < len(seeds); {
		j := i
		for j+1 < len(seeds) && seeds[j+1] == seeds[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, fmt.Sprint(seeds[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", seeds[i], seeds[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
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
	// harness are the fuzzer's own failures (the exit gate's).
	harness []string
	// late is the most a request sender woke after its planned time.
	late time.Duration
}

// fuzzAttempts is how many runs a schedule gets while the fuzzer
// measures in each a cause that voids its timing (mux.FuzzCauses).
const fuzzAttempts = 3

// fuzzMargin is the least time a schedule keeps between two events whose
// order matters (fuzzGap); a request sender that wakes half of it late
// voids the run ("late-sender").
const fuzzMargin = 50 * time.Millisecond

// fuzzCompare plays s on both multiplexors and fails the test on every
// difference the fuzzer cannot explain (fuzzDiffs), printing the command
// that replays s; it returns how many it found. The differences it
// explains are logged with their cause. A run with differences in which
// the fuzzer measured a cause that voids its timing ("late-sender": one
// of its own request senders woke half the margin late) is not judged:
// it is logged, and s played again on a fresh pair, up to fuzzAttempts
// runs in all; if every run is void, the last one's differences fail.
func fuzzCompare(t *testing.T, s *fuzzSchedule) int {
	t.Logf("schedule %v", s)
	for attempt := 1; ; attempt++ {
		n, diffs, explained, late := fuzzAttempt(t, s)
		for _, e := range explained {
			t.Logf("seed %d: explained: %s", s.seed, e)
		}
		if n == 0 && len(diffs) > 0 && late >= fuzzMargin/2 {
			why := fmt.Sprintf("a request sender woke %v late: %s", late.Round(time.Millisecond), fuzzCause("late-sender"))
			if attempt < fuzzAttempts {
				t.Logf("seed %d: run %d of at most %d not judged, %s; its differences:\n%s\nplaying it again",
					s.seed, attempt, fuzzAttempts, why, strings.Join(diffs, "\n"))
				continue
			}
			t.Errorf("seed %d: all %d runs void (in the last, %s); its differences follow", s.seed, attempt, why)
		}
		for _, d := range diffs {
			t.Errorf("seed %d: %s", s.seed, d)
		}
		if n += len(diffs); n > 0 {
			t.Errorf("seed %d failed; replay it with: %s", s.seed, fuzzReplay(s.seed))
		}
		return n
	}
}

// fuzzAttempt runs s on a fresh pair. It reports sluice's broken
// invariants and the harness's failures (their count is n) and returns
// the differences from the reference, unexplained and explained, and how
// late the request senders woke on either side.
func fuzzAttempt(t *testing.T, s *fuzzSchedule) (n int, diffs, explained []string, late time.Duration) {
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
	for _, o := range []*fuzzOutcome{got, want} {
		if o == nil {
			continue
		}
		for _, p := range o.harness {
			n++
			t.Errorf("seed %d: the fuzzer: %s", s.seed, p)
		}
	}
	if ref == nil {
		return n, nil, nil, got.late
	}
	for _, p := range want.problems {
		t.Logf("seed %d: reference: %s (its own; not a difference)", s.seed, p)
	}
	late = max(got.late, want.late)
	t.Logf("seed %d: request senders woke up to %v late", s.seed, late)
	diffs, explained = fuzzDiffs(s, got, want)
	return n, diffs, explained, late
}

// fuzzDiffs lists the differences between two outcomes that the fuzzer
// cannot explain, and those it can, with their cause.
func fuzzDiffs(s *fuzzSchedule, got, want *fuzzOutcome) (diffs, explained []string) {
	add := func(format string, a ...any) { diffs = append(diffs, fmt.Sprintf(format, a...)) }
	for pi, ph := range s.phases {
		for i, q := range ph.reqs {
			g, w := got.replies[pi][i], want.replies[pi][i]
			if g == w {
				continue
			}
			if why := fuzzTolerated(q, g, w); why != "" {
				explained = append(explained, fmt.Sprintf("phase %d request %s: sluice %q, reference %q: %s", pi, q, g, w, why))
				continue
			}
			add("phase %d request %s: sluice %q, reference %q", pi, q, trunc(g, 300), trunc(w, 300))
		}
		if pi >= len(got.probes) || pi >= len(want.probes) {
			continue
		}
		gp, wp := got.probes[pi], want.probes[pi]
		for i, q := range ph.probes {
			if i < len(gp) && i < len(wp) && gp[i] != wp[i] {
				add("phase %d probe %q: sluice %q, reference %q", pi, q, trunc(gp[i], 300), trunc(wp[i], 300))
			}
		}
	}
	gs := got.stats
	if got.died != want.died {
		sig := s.phases[len(s.phases)-1].signal
		if !got.died && sig == syscall.SIGUSR1 {
			// sluice lives on, and reaps its workers at the end.
			gs = fuzzTrimReaps(gs, len(want.stats))
			explained = append(explained, fmt.Sprintf("after %v the reference died, sluice lived on: %s", sig, fuzzCite("unhandled-signals")))
		} else {
			add("after %v: sluice died %v, reference died %v", sig, got.died, want.died)
		}
	}
	if !reflect.DeepEqual(got.notes, want.notes) {
		add("notifications differ:\n%s", fuzzDiff(got.notes, want.notes))
	}
	if ws := want.stats; !reflect.DeepEqual(gs, ws) {
		if g, w := fuzzSortReaps(gs), fuzzSortReaps(ws); reflect.DeepEqual(g, w) {
			explained = append(explained, "workers reaped back to back in another order: the kernel's, which of two"+
				" children killed together exits first")
		} else {
			add("stats records differ:\n%s", fuzzDiff(gs, ws))
		}
	}
	return diffs, explained
}

// fuzzTolerated explains two replies to q that differ, or returns "":
// a worker that writes half a line and exits is relayed by sluice, which
// gives a worker reaped while busy 1 s to deliver its output
// ("eof-worker"), and by the reference only when it reads the half line
// before it finds the worker gone; otherwise it reports an error writing
// the command (its own race, seen in its reply).
func fuzzTolerated(q fuzzReq, got, want string) string {
	if strings.HasPrefix(q.data, "partial") && got == "part" && want == "error: Error talking to worker process\n" {
		return "the reference reaped the worker before it read its half line; " + fuzzCite("eof-worker")
	}
	return ""
}

// fuzzCite names a deliberate difference (mux.Differences) the fuzzer
// tolerates; an id that is not listed panics, so that the fuzzer
// tolerates nothing the documentation does not say.
func fuzzCite(id string) string {
	if _, ok := mux.LookupDifference(id); !ok {
		panic("the fuzzer tolerates an unlisted difference: " + id)
	}
	return "deliberate difference " + id + " (internal/mux/differences.go)"
}

// fuzzCause names a cause the fuzzer measured in a run (mux.FuzzCauses);
// an id that is not listed panics.
func fuzzCause(id string) string {
	for _, c := range mux.FuzzCauses {
		if c.ID == id {
			return "cause " + id + " (internal/mux/differences.go): " + c.Summary
		}
	}
	panic("the fuzzer names an unlisted cause: " + id)
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

// fuzzSortReaps returns stats with the worker numbers of each run of
// consecutive ReapWorker records in ascending order (the records' other
// fields, nworkers counting down, stay where they are): which of two
// workers killed together is reaped first is the order in which the
// kernel lets them exit, on either multiplexor.
func fuzzSortReaps(stats []string) []string {
	out := slices.Clone(stats)
	worker := regexp.MustCompile(`\bworker=\d+`)
	for i := 0; i < len(out); {
		j := i
		for j < len(out) && strings.Contains(out[j], " ReapWorker ") && worker.MatchString(out[j]) {
			j++
		}
		if j-i < 2 {
			i = max(j, i+1)
			continue
		}
		ids := make([]string, 0, j-i)
		for _, l := range out[i:j] {
			ids = append(ids, worker.FindString(l))
		}
		slices.Sort(ids)
		for k := i; k < j; k++ {
			out[k] = worker.ReplaceAllLiteralString(out[k], ids[k-i])
		}
		i = j
	}
	return out
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

// TestFuzzSortReaps: two workers reaped back to back compare equal in
// either order; a reap and another record, or reaps of other workers, do
// not.
func TestFuzzSortReaps(t *testing.T) {
	reap := func(w, n int) string { return fmt.Sprintf("T ReapWorker worker=%d nworkers=%d nbusy=0", w, n) }
	kill := "T KillWorker worker=1 nworkers=2 nbusy=0"
	for _, tc := range []struct {
		name string
		a, b []string
		same bool
	}{
		{"swapped pair", []string{kill, reap(0, 1), reap(1, 0)}, []string{kill, reap(1, 1), reap(0, 0)}, true},
		{"identical", []string{reap(0, 1), reap(1, 0)}, []string{reap(0, 1), reap(1, 0)}, true},
		{"other workers", []string{reap(0, 1), reap(1, 0)}, []string{reap(0, 1), reap(2, 0)}, false},
		{"counts differ", []string{reap(0, 1), reap(1, 0)}, []string{reap(1, 0), reap(0, 1)}, false},
		{"not back to back", []string{reap(0, 1), kill, reap(1, 0)}, []string{reap(1, 1), kill, reap(0, 0)}, false},
	} {
		if got := reflect.DeepEqual(fuzzSortReaps(tc.a), fuzzSortReaps(tc.b)); got != tc.same {
			t.Errorf("%s: equal %v, want %v", tc.name, got, tc.same)
		}
	}
}
