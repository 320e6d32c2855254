package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sluice/bench/internal/daemons"
)

func TestMain(m *testing.M) {
	daemons.RunWatchdogIfAsked()
	os.Exit(m.Run())
}

func TestParseSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want settings
		bad  bool
	}{
		{"defaults", nil, nil, settings{3, []int{1000, 2000, 3000}, 10000, "", nil}, false},
		{"QUICK=1", map[string]string{"QUICK": "1"}, nil, settings{1, []int{100, 300, 500}, 2000, "", nil}, false},
		{"QUICK=1 ignores ROUNDS, keeps MSGS and IDLE", map[string]string{"QUICK": "1", "ROUNDS": "5", "MSGS": "1 2 3", "IDLE": "7"}, nil,
			settings{1, []int{1, 2, 3}, 7, "", nil}, false},
		{"environment", map[string]string{"ROUNDS": "5", "MSGS": "500 3000 5000", "IDLE": "10000"}, nil,
			settings{5, []int{500, 3000, 5000}, 10000, "", nil}, false},
		{"flags win", map[string]string{"ROUNDS": "5", "MSGS": "1 2 3"}, []string{"-rounds", "2", "-msgs", "4 5 6", "-idle", "9"},
			settings{2, []int{4, 5, 6}, 9, "", nil}, false},
		{"-quick", nil, []string{"-quick"}, settings{1, []int{100, 300, 500}, 2000, "", nil}, false},
		{"-quick with -rounds", nil, []string{"-quick", "-rounds", "2"}, settings{2, []int{100, 300, 500}, 2000, "", nil}, false},
		{"QUICK other than 1 is off", map[string]string{"QUICK": "yes"}, nil, settings{3, []int{1000, 2000, 3000}, 10000, "", nil}, false},
		{"MSGS with two counts", map[string]string{"MSGS": "1 2"}, nil, settings{}, true},
		{"MSGS not numbers", map[string]string{"MSGS": "a b c"}, nil, settings{}, true},
		{"MSGS with a zero", map[string]string{"MSGS": "1 0 3"}, nil, settings{}, true},
		{"ROUNDS not a number", map[string]string{"ROUNDS": "three"}, nil, settings{}, true},
		{"IDLE not a number", map[string]string{"IDLE": "many"}, nil, settings{}, true},
		{"no rounds", nil, []string{"-rounds", "0"}, settings{}, true},
		{"an argument", nil, []string{"now"}, settings{}, true},
		{"an unknown flag", nil, []string{"-fast"}, settings{}, true},
		{"TARGETS", map[string]string{"TARGETS": "floor sluice-connect postfix-alone"}, nil,
			settings{3, []int{1000, 2000, 3000}, 10000, "", []string{"floor", "sluice-connect", "postfix-alone"}}, false},
		{"-targets wins", map[string]string{"TARGETS": "nonsense"}, []string{"-targets", "postfix-alone sluice-connect"},
			settings{3, []int{1000, 2000, 3000}, 10000, "", []string{"postfix-alone", "sluice-connect"}}, false},
		{"TARGETS unknown", map[string]string{"TARGETS": "postfix-alone sluice-connect opendkim"}, nil, settings{}, true},
		{"TARGETS twice", map[string]string{"TARGETS": "postfix-alone sluice-connect floor floor"}, nil, settings{}, true},
		{"TARGETS without postfix-alone", map[string]string{"TARGETS": "sluice-connect floor"}, nil, settings{}, true},
		{"TARGETS without sluice-connect", map[string]string{"TARGETS": "postfix-alone floor"}, nil, settings{}, true},
		{"TARGETS naming baseline-connect", map[string]string{"TARGETS": "postfix-alone sluice-connect baseline-connect"}, nil, settings{}, true},
	} {
		getenv := func(k string) string { return tc.env[k] }
		got, err := parseSettings(tc.args, getenv, io.Discard)
		if tc.bad {
			if err == nil {
				t.Errorf("%s: no error, got %+v", tc.name, got)
			}
			continue
		}
		if err != nil || got.rounds != tc.want.rounds || got.idle != tc.want.idle || !slices.Equal(got.msgs, tc.want.msgs) ||
			!slices.Equal(got.only, tc.want.only) {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

// TestHelp: -h prints the usage with every knob, and exits 0.
func TestHelp(t *testing.T) {
	var out bytes.Buffer
	if code := realMain([]string{"-h"}, func(string) string { return "" }, io.Discard, &out); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"QUICK=1", "ROUNDS", "MSGS", "IDLE", "BASELINE", "TARGETS", "-quick", "-rounds", "-msgs", "-idle", "-baseline", "-targets"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-h does not mention %s:\n%s", want, out.String())
		}
	}
}

// oldRun is the medians of a QUICK=1 run of the shell bench/milter.sh
// (2026-11-27, one round) and what it printed from them.
var oldRun = map[string][3]float64{ // msgs_per_s at c = 1, 10, 100
	"postfix-alone":     {157.4, 720.8, 451.3},
	"sluice-connect":    {114.8, 509.6, 387.9},
	"sluice-all":        {177.9, 362.9, 425.1},
	"libmilter":         {93.7, 174.1, 391.8},
	"libmilter-connect": {270.4, 250.2, 491.3},
	"floor":             {373.8, 613.1, 390.8},
}

const oldGoals = `goals: sluice-connect/postfix-alone c=1 0.73 (>= 0.80: MISSED), c=10 0.71 (>= 0.80: MISSED); sluice-connect/floor c=1 0.31 (>= 0.95: MISSED), c=10 0.83 (>= 0.95: MISSED); sluice-all/libmilter c=1 1.90 (>= 1.2: met) c=10 2.08 (>= 1.2: met) c=100 1.08 (>= 1.2: MISSED) 
(floor/postfix-alone is the most any CONNECT-only milter can reach: c=1 2.37, c=10 0.85)
`

const oldRatios = `milter ratio sluice-all/libmilter c=1: 1.90
milter ratio sluice-all/libmilter c=10: 2.08
milter ratio sluice-all/libmilter c=100: 1.08
milter ratio sluice-all/postfix-alone c=1: 1.13
milter ratio sluice-all/postfix-alone c=10: 0.50
milter ratio sluice-all/postfix-alone c=100: 0.94
milter ratio sluice-connect/libmilter-connect c=1: 0.42
milter ratio sluice-connect/libmilter-connect c=10: 2.04
milter ratio sluice-connect/libmilter-connect c=100: 0.79
milter ratio floor/postfix-alone c=1: 2.37
milter ratio floor/postfix-alone c=10: 0.85
milter ratio floor/postfix-alone c=100: 0.87
milter ratio sluice-connect/floor c=100: 0.99
milter ratio sluice-connect/floor c=1: 0.31
milter ratio sluice-connect/floor c=10: 0.83
milter ratio sluice-connect/postfix-alone c=100: 0.86
milter ratio sluice-connect/postfix-alone c=1: 0.73
milter ratio sluice-connect/postfix-alone c=10: 0.71
`

func oldResults() *results {
	r := &results{measured: targets}
	for t, v := range oldRun {
		for i, c := range concurrency {
			r.mps.Add(t, c, v[i])
		}
	}
	return r
}

// TestReportAsTheScript: the goals and ratio lines are byte for byte
// what the shell script printed from the same medians.
func TestReportAsTheScript(t *testing.T) {
	r := oldResults()
	var goals, ratios bytes.Buffer
	writeGoals(&goals, r)
	writeRatios(&ratios, r)
	if goals.String() != oldGoals {
		t.Errorf("goals:\n%q\nwant\n%q", goals.String(), oldGoals)
	}
	if ratios.String() != oldRatios {
		t.Errorf("ratios:\n%s\nwant\n%s", ratios.String(), oldRatios)
	}
	if !strings.HasSuffix(ratios.String(), "milter ratio sluice-connect/postfix-alone c=10: 0.71\n") {
		t.Error("the last line is not sluice-connect/postfix-alone at c=10")
	}
}

// TestSpreadsAndTable: with three rounds, each ratio's spread is the
// smallest and largest round's own ratio, and the table has the median
// rate with the slowest and fastest round beside it.
func TestSpreadsAndTable(t *testing.T) {
	r := oldResults()
	for _, t := range targets {
		for _, c := range concurrency {
			r.mps.Add(t, c, 100)
			r.mps.Add(t, c, 200)
			r.cpu.Add(t, c, 10)
			r.cs.Add(t, c, 1.5)
		}
	}
	r.mps.Add("sluice-connect", 10, 0) // a fourth round for one target only: ignored by the pairs
	var spreads, table bytes.Buffer
	writeSpreads(&spreads, r)
	lines := strings.Split(strings.TrimSuffix(spreads.String(), "\n"), "\n")
	if len(lines) != 1+18 {
		t.Fatalf("%d spread lines:\n%s", len(lines), spreads.String())
	}
	// sluice-all/libmilter c=1: rounds 177.9/93.7, 100/100, 200/200.
	if want := "spread sluice-all/libmilter c=1: min 1.00 max 1.90 over 3 rounds"; lines[1] != want {
		t.Errorf("first spread %q, want %q", lines[1], want)
	}
	for _, l := range lines[1:] {
		if strings.Contains(l, "milter ratio") {
			t.Errorf("a spread line looks like a ratio line: %q", l)
		}
	}
	writeTable(&table, r, 3, msgSize, 2, "1.00 0.50 0.25")
	want := "10   sluice-connect            150.0           10.0        1.5        0.0      509.6\n" // four rounds: (100+200)/2
	if !strings.Contains(table.String(), want) {
		t.Errorf("the table has no line %q:\n%s", want, table.String())
	}
	if !strings.Contains(table.String(), "load average at the end: 1.00 0.50 0.25):\n") {
		t.Errorf("the table's header:\n%s", table.String())
	}
}

func TestCountLines(t *testing.T) {
	log := strings.Join([]string{
		"Nov 27 18:48:20 host postfix/discard[123]: 4Q: to=<rcpt@example.net>, relay=none, status=sent (example.net)",
		"Nov 27 18:48:20 host postfix/discard[124]: 4R: to=<rcpt@example.net>, status=sent (example.net)",
		"Nov 27 18:48:20 host postfix/smtp[125]: 4S: to=<x@example.net>, status=sent (250 ok)",      // not discard
		"Nov 27 18:48:20 host postfix/discard[126]: 4T: to=<rcpt@example.net>, status=deferred (x)", // not sent
		"postfix/discard status=sent", // no [pid]
		"\x00\xff garbage",
		"",
	}, "\n")
	if got := countLines(log, deliveredLine); got != 2 {
		t.Errorf("delivered %d, want 2", got)
	}
	if got := countLines("", deliveredLine); got != 0 {
		t.Errorf("delivered %d in an empty log", got)
	}
	if got := countLines("warning: x\nfatal: y\nok\n", regexp.MustCompile(`warning|fatal`)); got != 2 {
		t.Errorf("%d complaints, want 2", got)
	}
}

func TestOneDecimal(t *testing.T) {
	for _, tc := range []struct{ in, want float64 }{{612.34, 612.3}, {612.35, 612.4}, {-0.04, 0}, {0.25, 0.2}, {1e6 / 3, 333333.3}} {
		if got := oneDecimal(tc.in); got != tc.want {
			t.Errorf("oneDecimal(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestCSourcesCompile: the embedded C milters compile (cc -fsyntax-only;
// the libmilter ones only where libmilter-dev is installed).
func TestCSourcesCompile(t *testing.T) {
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("no cc")
	}
	dir := t.TempDir()
	entries, err := cSources.ReadDir("c")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, _ := cSources.ReadFile("c/" + e.Name())
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files := []string{"floor.c"}
	if _, err := os.Stat("/usr/include/libmilter/mfapi.h"); err == nil {
		files = append(files, "acceptall.c", "connectonly.c", "libmilter_main.c")
	}
	for _, f := range files {
		out, err := exec.Command("cc", "-fsyntax-only", "-Wall", "-Werror", "-Wno-unused-parameter", filepath.Join(dir, f)).CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", f, err, out)
		}
	}
}

// TestBaselineSetting: BASELINE (or -baseline, which wins) names an
// executable file, made absolute, and adds baseline-connect to the
// targets; anything else is refused.
func TestBaselineSetting(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := func(v string) func(string) string {
		return func(k string) string { return map[string]string{"BASELINE": v}[k] }
	}
	s, err := parseSettings(nil, env(exe), io.Discard)
	if err != nil || s.baseline != exe || !slices.Equal(s.targets(), append(slices.Clone(targets), "baseline-connect")) {
		t.Fatalf("BASELINE=%s: %+v %v", exe, s, err)
	}
	if s, err := parseSettings([]string{"-baseline", exe}, env(plain), io.Discard); err != nil || s.baseline != exe {
		t.Fatalf("-baseline over BASELINE: %+v %v", s, err)
	}
	if s, _ := parseSettings(nil, env(""), io.Discard); s.baseline != "" || !slices.Equal(s.targets(), targets) {
		t.Fatalf("no BASELINE: %+v", s)
	}
	for _, bad := range []string{plain, filepath.Dir(plain), plain + ".missing"} {
		if _, err := parseSettings(nil, env(bad), io.Discard); err == nil || !strings.Contains(err.Error(), "BASELINE="+bad) {
			t.Errorf("BASELINE=%s: %v", bad, err)
		}
	}
}

// TestBaselineReport: with a baseline, the table has its row and the
// sluice-connect/baseline-connect ratios come first; the last line stays
// sluice-connect/postfix-alone at c=10.
func TestBaselineReport(t *testing.T) {
	r := &results{measured: targetList(true)}
	for _, tg := range targetList(true) {
		for _, c := range concurrency {
			v := 100.0
			if tg == baselineTarget {
				v = 80
			}
			r.mps.Add(tg, c, v)
		}
	}
	var ratios, table bytes.Buffer
	writeRatios(&ratios, r)
	lines := strings.Split(strings.TrimSuffix(ratios.String(), "\n"), "\n")
	if lines[0] != "milter ratio sluice-connect/baseline-connect c=1: 1.25" || lines[2] != "milter ratio sluice-connect/baseline-connect c=100: 1.25" {
		t.Errorf("first lines:\n%s", strings.Join(lines[:3], "\n"))
	}
	if lines[len(lines)-1] != "milter ratio sluice-connect/postfix-alone c=10: 1.00" {
		t.Errorf("last line %q", lines[len(lines)-1])
	}
	writeTable(&table, r, 1, msgSize, 2, "0.00")
	if !regexp.MustCompile(`(?m)^1 +baseline-connect +80\.0 `).MatchString(table.String()) {
		t.Errorf("no baseline row at c=1:\n%s", table.String())
	}
}

// TestTargetsSubset: TARGETS runs its targets in the seven's order (with
// baseline-connect after them under BASELINE), and the report prints only
// the ratio lines and goals whose targets ran, the last line unchanged.
func TestTargetsSubset(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TARGETS": "floor postfix-alone libmilter-connect sluice-connect", "BASELINE": exe}
	s, err := parseSettings(nil, func(k string) string { return env[k] }, io.Discard)
	want := []string{"postfix-alone", "sluice-connect", "libmilter-connect", "floor", "baseline-connect"}
	if err != nil || !slices.Equal(s.targets(), want) {
		t.Fatalf("targets %v, %v; want %v", s.targets(), err, want)
	}
	r := &results{measured: s.targets()}
	for _, tg := range r.measured {
		for _, c := range concurrency {
			r.mps.Add(tg, c, 100)
		}
	}
	var ratios, goals bytes.Buffer
	writeRatios(&ratios, r)
	writeGoals(&goals, r)
	out := ratios.String() + goals.String()
	for _, gone := range []string{"sluice-all", "/libmilter "} {
		if strings.Contains(out, gone) {
			t.Errorf("%q printed though it did not run:\n%s", gone, out)
		}
	}
	for _, kept := range []string{
		"milter ratio sluice-connect/baseline-connect c=1: 1.00\n",
		"milter ratio sluice-connect/libmilter-connect c=100: 1.00\n",
		"milter ratio floor/postfix-alone c=10: 1.00\n",
		"goals: sluice-connect/postfix-alone c=1 1.00 (>= 0.80: met), c=10 1.00 (>= 0.80: met); sluice-connect/floor c=1 1.00",
		"(floor/postfix-alone is the most",
	} {
		if !strings.Contains(out, kept) {
			t.Errorf("no %q in:\n%s", kept, out)
		}
	}
	lines := strings.Split(strings.TrimSuffix(ratios.String(), "\n"), "\n")
	if last := lines[len(lines)-1]; last != "milter ratio sluice-connect/postfix-alone c=10: 1.00" {
		t.Errorf("last line %q", last)
	}
}

// TestTargetsRequired: the smallest TARGETS prints the one goal and the
// three ratio lines of its pair, no floor line; the errors say what is
// wrong.
func TestTargetsRequired(t *testing.T) {
	r := &results{measured: []string{"postfix-alone", "sluice-connect"}}
	for _, c := range concurrency {
		r.mps.Add("postfix-alone", c, 100)
		r.mps.Add("sluice-connect", c, 50)
	}
	var ratios, goals bytes.Buffer
	writeRatios(&ratios, r)
	writeGoals(&goals, r)
	wantRatios := "milter ratio sluice-connect/postfix-alone c=100: 0.50\n" +
		"milter ratio sluice-connect/postfix-alone c=1: 0.50\n" +
		"milter ratio sluice-connect/postfix-alone c=10: 0.50\n"
	if ratios.String() != wantRatios {
		t.Errorf("ratios:\n%s\nwant:\n%s", ratios.String(), wantRatios)
	}
	wantGoals := "goals: sluice-connect/postfix-alone c=1 0.50 (>= 0.80: MISSED), c=10 0.50 (>= 0.80: MISSED)\n"
	if goals.String() != wantGoals {
		t.Errorf("goals:\n%s\nwant:\n%s", goals.String(), wantGoals)
	}
	for v, want := range map[string]string{
		"postfix-alone sluice-connect baseline-connect": "comes with BASELINE",
		"postfix-alone sluice-connect opendkim":         `unknown target "opendkim"`,
		"postfix-alone sluice-connect sluice-connect":   "sluice-connect named twice",
		"sluice-connect floor":                          "lacks postfix-alone",
		"postfix-alone":                                 "lacks sluice-connect",
	} {
		if _, err := parseTargets(v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("TARGETS=%q: %v, want an error saying %q", v, err, want)
		}
	}
}

// TestCosts: the cost table has each milter's CPU time and context
// switches per message with their range, and the sluice-connect/floor and
// go-floor/floor CPU lines are the ratios of the medians, or n/a when the
// floor's is 0.
func TestCosts(t *testing.T) {
	r := &results{measured: []string{"postfix-alone", "sluice-connect", "floor", "go-floor"}}
	for _, c := range concurrency {
		for _, v := range []float64{30, 40, 90} {
			r.cpu.Add("sluice-connect", c, v)
			r.cs.Add("sluice-connect", c, v/10)
			r.cpu.Add("go-floor", c, 2*v)
		}
		if c != 100 {
			r.cpu.Add("floor", c, 20)
		}
	}
	var b bytes.Buffer
	writeCosts(&b, r)
	for _, want := range []string{
		"1    sluice-connect             40.0 (30.0-90.0)        4.0 (3.0-9.0)\n",
		"milter cpu sluice-connect/floor c=10: 2.00\n",
		"milter cpu sluice-connect/floor c=100: n/a (the floor's CPU time was below a clock tick)\n",
		"milter cpu go-floor/floor c=1: 4.00\n",
		"milter cpu go-floor/floor c=100: n/a (the floor's CPU time was below a clock tick)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("costs lack %q:\n%s", want, b.String())
		}
	}
	r.measured = []string{"postfix-alone", "sluice-connect", "go-floor"}
	b.Reset()
	writeCosts(&b, r)
	if strings.Contains(b.String(), "milter cpu") {
		t.Errorf("a ratio line without the floor:\n%s", b.String())
	}
}
