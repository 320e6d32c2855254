package main

import (
	"bytes"
	"io"
	"os"
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
		{"defaults", nil, nil, settings{duration: "5s", rounds: 3, postfwdCache: 0}, false},
		{"QUICK=1 ignores DURATION and ROUNDS", map[string]string{"QUICK": "1", "DURATION": "10s", "ROUNDS": "5"}, nil, settings{duration: "1s", rounds: 1, postfwdCache: 0}, false},
		{"environment", map[string]string{"DURATION": "10s", "ROUNDS": "5", "POSTFWD_CACHE": "600"}, nil, settings{duration: "10s", rounds: 5, postfwdCache: 600}, false},
		{"flags win", map[string]string{"DURATION": "10s", "ROUNDS": "5"}, []string{"-duration", "2s", "-rounds", "4", "-postfwd-cache", "60"}, settings{duration: "2s", rounds: 4, postfwdCache: 60}, false},
		{"-quick", nil, []string{"-quick"}, settings{duration: "1s", rounds: 1, postfwdCache: 0}, false},
		{"-quick with -rounds", nil, []string{"-quick", "-rounds", "2"}, settings{duration: "1s", rounds: 2, postfwdCache: 0}, false},
		{"DURATION not a duration", map[string]string{"DURATION": "5"}, nil, settings{}, true},
		{"a negative duration", nil, []string{"-duration", "-1s"}, settings{}, true},
		{"ROUNDS not a number", map[string]string{"ROUNDS": "x"}, nil, settings{}, true},
		{"no rounds", nil, []string{"-rounds", "0"}, settings{}, true},
		{"POSTFWD_CACHE not a number", map[string]string{"POSTFWD_CACHE": "on"}, nil, settings{}, true},
		{"a negative cache", nil, []string{"-postfwd-cache", "-1"}, settings{}, true},
		{"an argument", nil, []string{"now"}, settings{}, true},
		{"BASELINE", map[string]string{"BASELINE": "/bin/true"}, nil, settings{duration: "5s", rounds: 3, baseline: "/bin/true"}, false},
		{"-baseline wins", map[string]string{"BASELINE": "/bin/false"}, []string{"-baseline", "/bin/true"}, settings{duration: "5s", rounds: 3, baseline: "/bin/true"}, false},
		{"a baseline that is no executable", nil, []string{"-baseline", "/etc"}, settings{}, true},
		{"a missing baseline", map[string]string{"BASELINE": "/nonexistent/sluice"}, nil, settings{}, true},
	} {
		getenv := func(k string) string { return tc.env[k] }
		got, err := parseSettings(tc.args, getenv, io.Discard)
		if tc.bad {
			if err == nil {
				t.Errorf("%s: no error, got %+v", tc.name, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
}

func TestHelp(t *testing.T) {
	var out bytes.Buffer
	if code := realMain([]string{"-h"}, func(string) string { return "" }, io.Discard, &out); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"QUICK=1", "DURATION", "ROUNDS", "POSTFWD_CACHE", "-quick", "-duration", "-rounds", "-postfwd-cache"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-h does not mention %s:\n%s", want, out.String())
		}
	}
}

// oldRun is the medians of a QUICK=1 run of the shell bench/policy.sh
// (2026-11-27, one round) and what it printed from them.
var oldRun = map[string][3]float64{ // rps at c = 1, 8, 64
	"sluice":             {27207.0, 34992.0, 49270.0},
	"postfwd":            {1910.0, 676.0, 1035.0},
	"policyd-rate-limit": {9504.0, 17377.0, 19036.0},
}

const oldGoals = "goals at c=64: sluice/postfwd 47.60 (>= 25: met), sluice/policyd-rate-limit 2.59 (>= 4: MISSED), sluice p99 5570.6 us (<= 3000: MISSED)\n"

const oldRatios = `policy ratio sluice/policyd-rate-limit c=1: 2.86
policy ratio sluice/policyd-rate-limit c=8: 2.01
policy ratio sluice/policyd-rate-limit c=64: 2.59
policy ratio sluice/postfwd c=1: 14.24
policy ratio sluice/postfwd c=8: 51.76
policy ratio sluice/postfwd c=64: 47.60
`

func oldResults() *results {
	r := &results{targets: settings{}.targets(), errors: map[string]int{}}
	for t, v := range oldRun {
		for i, c := range concurrency {
			r.rps.Add(t, c, v[i])
		}
	}
	r.p99.Add("sluice", 64, 5570.6)
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
	// Two rounds: the p99 median is the mean, printed as awk prints it.
	r.p99.Add("sluice", 64, 2000)
	goals.Reset()
	writeGoals(&goals, r)
	if !strings.Contains(goals.String(), "sluice p99 3785.3 us (<= 3000: MISSED)") {
		t.Errorf("goals with two rounds: %q", goals.String())
	}
}

func TestSpreadsAndTable(t *testing.T) {
	r := oldResults()
	for _, t := range append([]string{"sluice"}, peers...) {
		for _, c := range concurrency {
			r.rps.Add(t, c, 1000)
			r.cpu.Add(t, c, 20)
			r.p50.Add(t, c, 100)
			r.client.Add(t, c, 7.5)
		}
	}
	r.errors["postfwd,8"] = 3
	var spreads, table bytes.Buffer
	writeSpreads(&spreads, r)
	// sluice/postfwd c=64: rounds 49270/1035 = 47.60 and 1000/1000.
	if !strings.Contains(spreads.String(), "spread sluice/postfwd c=64: min 1.00 max 47.60 over 2 rounds\n") {
		t.Errorf("spreads:\n%s", spreads.String())
	}
	if strings.Contains(spreads.String(), "policy ratio") {
		t.Errorf("a spread line looks like a ratio line:\n%s", spreads.String())
	}
	writeTable(&table, r, settings{duration: "1s", rounds: 2, postfwdCache: 0}, 2)
	for _, want := range []string{
		"medians over 2 round(s), 1s per run, 2 CPUs shared by load generator and servers\n",
		"64   sluice                    25135.0      100.0     5570.6        0.0           20.0       0.00            7.5       1000.0      49270.0\n",
		"warning: postfwd at c=8 had 3 errors over all rounds\n",
	} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("the table has no %q:\n%s", want, table.String())
		}
	}
}

// TestProbeLines: the probe lines of the shell script's run, from the
// same policyload output.
func TestProbeLines(t *testing.T) {
	for _, tc := range []struct {
		target, out, want string
		bad               bool
	}{
		{"sluice", `target=sluice probe=1001 admitted=1000 refused=1 first_refused=1001 refused_rcpt=0 refused_eom=1 errors=0 first_action="DEFER_IF_PERMIT too much mail from sender=probe@probe.example: 1000/1000"`,
			`probe sluice: admitted=1000 refused=1 (first refused: message 1001; refused at RCPT 0, at END-OF-MESSAGE 1: "DEFER_IF_PERMIT too much mail from sender=probe@probe.example: 1000/1000")` + "\n", false},
		{"x", "target=x probe=1001 admitted=1001 refused=0 first_refused=0 refused_rcpt=0 refused_eom=0 errors=0 first_action=\"\"",
			"probe x: admitted=1001 refused=0\n" + strings.Repeat("!", 76) + "\n!!! WARNING: x refused none of 1001 messages from one sender:\n", false},
		{"y", "target=y probe=1001 admitted=990 refused=11 first_refused=991 refused_rcpt=0 refused_eom=11 errors=0 first_action=\"DEFER\"",
			"warning: y admitted 990 of 1001 messages, not 1000\n", false},
		{"z", "target=z admitted=many refused=0", "", true},
		{"z", "garbage", "", true},
	} {
		var w bytes.Buffer
		err := writeProbe(&w, tc.target, tc.out)
		if (err != nil) != tc.bad {
			t.Errorf("%s: error %v", tc.target, err)
		}
		if !tc.bad && !strings.Contains(w.String(), tc.want) {
			t.Errorf("%s: got\n%s\nwant it to contain\n%s", tc.target, w.String(), tc.want)
		}
	}
}

func TestServerCPU(t *testing.T) {
	for _, tc := range []struct {
		ticks, hz, rps, secs, warm, want float64
	}{
		{100, 100, 1000, 1, 0.5, 666.7}, // 1 s of CPU over 1,500 requests
		{0, 100, 1000, 1, 0.5, 0},
		{5, 100, 0, 1, 0.5, 0}, // nothing served
		{5, 0, 1000, 1, 0.5, 0},
		{-3, 100, 1000, 1, 0, -30}, // a process that restarted
	} {
		if got := serverCPU(tc.ticks, tc.hz, tc.rps, tc.secs, tc.warm); got != tc.want {
			t.Errorf("serverCPU(%v) = %v, want %v", tc, got, tc.want)
		}
	}
}

func TestReadPID(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		content string
		want    int
	}{{"1234\n", 1234}, {" 42 ", 42}, {"", 0}, {"none", 0}, {"12a3", 123}} {
		p := dir + "/pid"
		if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := readPID(p); got != tc.want {
			t.Errorf("readPID(%q) = %d, want %d", tc.content, got, tc.want)
		}
	}
	if readPID(dir+"/missing") != 0 {
		t.Error("a missing pid file has a pid")
	}
}

// TestReportWithFloorAndBaseline: the floor's and the baseline's ratio
// lines come before the peers' (the c=64 line against postfwd stays
// last), and the goals gain the floor's.
func TestReportWithFloorAndBaseline(t *testing.T) {
	r := oldResults()
	r.targets = settings{baseline: "/bin/true"}.targets()
	for i, c := range concurrency {
		r.rps.Add("floor", c, oldRun["sluice"][i]/0.9)
		r.rps.Add("baseline", c, oldRun["sluice"][i]/1.25)
	}
	var goals, ratios, spreads bytes.Buffer
	writeGoals(&goals, r)
	writeRatios(&ratios, r)
	writeSpreads(&spreads, r)
	if want := oldGoals + "goal at c=64: sluice/floor 0.90 (>= 0.85: met)\n"; goals.String() != want {
		t.Errorf("goals:\n%q\nwant\n%q", goals.String(), want)
	}
	want := `policy ratio sluice/floor c=1: 0.90
policy ratio sluice/floor c=8: 0.90
policy ratio sluice/floor c=64: 0.90
policy ratio sluice/baseline c=1: 1.25
policy ratio sluice/baseline c=8: 1.25
policy ratio sluice/baseline c=64: 1.25
` + oldRatios
	if ratios.String() != want {
		t.Errorf("ratios:\n%s\nwant\n%s", ratios.String(), want)
	}
	if !strings.Contains(spreads.String(), "spread sluice/floor c=64: min 0.90 max 0.90 over 1 round\n") {
		t.Errorf("spreads:\n%s", spreads.String())
	}
}

func TestPerRequest(t *testing.T) {
	for _, tc := range []struct{ n, rps, secs, warm, want float64 }{
		{3000, 1000, 1, 0.5, 2}, // 3,000 switches over 1,500 requests
		{0, 1000, 1, 0.5, 0},
		{5, 0, 1, 0.5, 0}, // nothing served
	} {
		if got := perRequest(tc.n, tc.rps, tc.secs, tc.warm); got != tc.want {
			t.Errorf("perRequest(%v) = %v, want %v", tc, got, tc.want)
		}
	}
}

// TestCosts: the cost table has every target's CPU time and context
// switches per request with their range, and the C floor's ratio lines
// judge the printed ratio, or say n/a when the floor's time is 0.
func TestCosts(t *testing.T) {
	r := &results{targets: settings{}.targets(), errors: map[string]int{}}
	for _, c := range concurrency {
		for _, v := range []float64{10, 12, 20} {
			r.cpu.Add("sluice", c, v)
			r.cs.Add("sluice", c, v/10)
		}
		r.cpu.Add("cfloor", c, 8)
	}
	r.cpu.Add("cfloor", 64, 0)
	r.cpu.Add("cfloor", 64, 0)
	var b bytes.Buffer
	writeCosts(&b, r)
	for _, want := range []string{
		"1    sluice                       12.0 (10.0-20.0)       1.20 (1.00-2.00)\n",
		"policy cpu sluice/cfloor c=1: 1.50 (<= 1.5: met)\n",
		"policy cpu sluice/cfloor c=64: n/a (the C floor's CPU time was below a clock tick)\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("costs lack %q:\n%s", want, b.String())
		}
	}
}
