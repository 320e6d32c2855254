package cli

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// A worker brought up to -m comes SlewTime (-w) after the last check on
// both sides, a chain of timers whose lateness adds up on a loaded
// machine; it can then come just before or just after a request's end
// (its EndFilter, KillWorker and ReapWorker) on either side, and the
// worker counts in the records between differ by one. fuzzBringUpBlocks
// rewrites each block of such records the same way, whichever order they
// came in: the request-end records in their order, then the bring-ups,
// their counts hidden. The fuzzer uses it only when the records differ
// otherwise, and logs it.

var (
	fuzzCounts = regexp.MustCompile(` nworkers=\d+ nbusy=\d+`)
	fuzzFree   = regexp.MustCompile(`^F \d+$`)
)

// fuzzStatsBringUp and fuzzStatsEnd tell a stats record's part in a block.
func fuzzStatsBringUp(lines []string, i int) bool {
	l := lines[i]
	return strings.Contains(l, " StartWorker ") && strings.Contains(l, `reason="Bringing workers up to minWorkers`)
}

func fuzzStatsEnd(l string) bool {
	return strings.Contains(l, " KillWorker ") || strings.Contains(l, " ReapWorker ") || strings.Contains(l, " EndFilter ")
}

// fuzzNoteBringUp and fuzzNoteEnd do the same for notifications (slot
// numbers already taken out): a slot coming up, and a slot going idle,
// being killed or stopped, with the free counts (F) between. A slot
// coming up is any start: a worker brought up to -m that the next request
// takes at once looks like one started on demand (the stats records,
// compared too, tell them apart by their reason).
func fuzzNoteBringUp(lines []string, i int) bool {
	return lines[i] == "S N StateChange Stopped -> Idle"
}

func fuzzNoteEnd(l string) bool {
	return fuzzFree.MatchString(l) || l == "S N StateChange Busy -> Idle" ||
		l == "S N StateChange Idle -> Killed" || l == "S N StateChange Killed -> Stopped"
}

// fuzzBringUpBlocks rewrites every maximal run of end and bring-up lines
// that holds at least one bring-up and one end: the ends in order, then
// the bring-ups, each through hide.
func fuzzBringUpBlocks(lines []string, bringUp func([]string, int) bool, end func(string) bool, hide func(string) string) []string {
	var out []string
	for i := 0; i < len(lines); {
		j := i
		ups, ends := 0, 0
		for j < len(lines) && (bringUp(lines, j) || end(lines[j])) {
			if bringUp(lines, j) {
				ups++
			} else {
				ends++
			}
			j++
		}
		if ups == 0 || ends == 0 {
			out = append(out, lines[i:max(j, i+1)]...)
			i = max(j, i+1)
			continue
		}
		var tail []string
		for k, l := range lines[i:j] {
			if bringUp(lines, i+k) {
				tail = append(tail, hide(l))
			} else {
				out = append(out, hide(l))
			}
		}
		out = append(out, tail...)
		i = j
	}
	return out
}

// fuzzHideStatsCounts and fuzzHideFree hide the counts of a block's lines.
func fuzzHideStatsCounts(l string) string {
	return fuzzCounts.ReplaceAllString(l, " nworkers=N nbusy=N")
}

func fuzzHideFree(l string) string { return fuzzFree.ReplaceAllString(l, "F N") }

// TestFuzzBringUpBlocks: a bring-up on either side of a request's end
// gives the same lines; anything else that differs still differs.
func TestFuzzBringUpBlocks(t *testing.T) {
	up := `T StartWorker worker=N nworkers=%s nbusy=%s reason="Bringing workers up to minWorkers (2)"`
	rec := func(f string, n ...string) string {
		for _, s := range n {
			f = strings.Replace(f, "%s", s, 1)
		}
		return f
	}
	kill := `T KillWorker worker=N nworkers=%s nbusy=0 req=1 age=N reason="Worker has reached its maximum number of requests"`
	reap := `T ReapWorker worker=N nworkers=%s nbusy=0`
	start := `T StartFilter worker=N nworkers=1 nbusy=1`
	norm := func(l []string) []string {
		return fuzzBringUpBlocks(l, fuzzStatsBringUp, fuzzStatsEnd, fuzzHideStatsCounts)
	}
	before := []string{start, rec(up, "2", "1"), rec(kill, "2"), rec(reap, "1"), rec(up, "2", "0")}
	after := []string{start, rec(kill, "1"), rec(reap, "0"), rec(up, "1", "0"), rec(up, "2", "0")}
	hidden := func(f string) string { return fuzzHideStatsCounts(rec(f, "0", "0")) }
	want := []string{start, hidden(kill), hidden(reap), hidden(up), hidden(up)}
	for _, l := range [][]string{before, after} {
		if got := norm(l); !slices.Equal(got, want) {
			t.Errorf("%q\nbecame %q\nwant   %q", l, got, want)
		}
	}
	for name, other := range map[string][]string{
		"reap before kill":     {start, rec(reap, "0"), rec(kill, "1"), rec(up, "1", "0"), rec(up, "2", "0")},
		"one bring-up less":    {start, rec(kill, "1"), rec(reap, "0"), rec(up, "1", "0")},
		"a filter in between":  {rec(kill, "1"), start, rec(reap, "0"), rec(up, "1", "0"), rec(up, "2", "0")},
		"counts outside block": {`T StartFilter worker=N nworkers=2 nbusy=1`, rec(kill, "1"), rec(reap, "0"), rec(up, "1", "0"), rec(up, "2", "0")},
	} {
		if slices.Equal(norm(before), norm(other)) {
			t.Errorf("%s: made the same as the reference's order", name)
		}
	}
	notes := func(l []string) []string { return fuzzBringUpBlocks(l, fuzzNoteBringUp, fuzzNoteEnd, fuzzHideFree) }
	a := []string{"S N StateChange Stopped -> Idle", "S N StateChange Busy -> Idle", "F 4", "S N StateChange Idle -> Killed", "F 3"}
	b := []string{"S N StateChange Busy -> Idle", "F 3", "S N StateChange Idle -> Killed", "F 2", "S N StateChange Stopped -> Idle"}
	if !slices.Equal(notes(a), notes(b)) {
		t.Errorf("notifications: %q and %q differ", notes(a), notes(b))
	}
	if got, want := notes(a), []string{"S N StateChange Busy -> Idle", "F N", "S N StateChange Idle -> Killed", "F N", "S N StateChange Stopped -> Idle"}; !slices.Equal(got, want) {
		t.Errorf("notifications %q\nbecame %q\nwant   %q", a, got, want)
	}
	// A worker taken busy ends a block: a start does not move past it.
	c := []string{"F 4", "S N StateChange Busy -> Idle", "S N StateChange Idle -> Busy", "S N StateChange Stopped -> Idle", "S N tag"}
	if got := notes(c); !slices.Equal(got, c) {
		t.Errorf("notifications %q\nbecame %q", c, got)
	}
	// The sluice and reference streams of seed 21 under load.
	sl := []string{"S N StateChange Stopped -> Idle", "S N StateChange Busy -> Idle", "F 4", "S N StateChange Idle -> Killed", "F 3",
		"S N StateChange Killed -> Stopped", "F 4", "S N StateChange Idle -> Busy", "F 3"}
	ref := []string{"S N StateChange Busy -> Idle", "F 4", "S N StateChange Idle -> Killed", "F 3",
		"S N StateChange Killed -> Stopped", "F 4", "S N StateChange Stopped -> Idle", "S N StateChange Idle -> Busy", "F 3"}
	if !slices.Equal(notes(sl), notes(ref)) {
		t.Errorf("notifications %q\nand %q\nbecame %q\nand %q", sl, ref, notes(sl), notes(ref))
	}
}
