package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// result is one round's figures.
type result struct {
	label                string
	base, flood          time.Duration
	baseOK, baseFail     int64
	baseP99              time.Duration
	floodOK, floodLate   int64
	floodFail            int64
	floodP99             time.Duration
	singleOK, singleN    int64
	held                 []float64 // bots' sessions held, sampled every 100 ms of the flood
	botConns, botRefused int64
	botDropped           int64
	bots                 int
	// The CPU time of the Postfix instance and sluice over the calm and
	// the flood, in ticks of tick a second (cpuRead: read at all).
	cpuRead           bool
	baseCPU, floodCPU uint64
	tick              float64
}

// line is the result as one line of name=value pairs:
//
//	row=L base_mps= flood_mps= goodput= p99_ms= late= fails= base_p99_ms= base_fails=
//	single_ok= singles= single_rate= bots= held_median= held_max=
//	bot_connects= bot_refused= bot_dropped= [base_cpu_us= flood_cpu_us=]
//
// goodput is flood_mps/base_mps (0 without a base): the known peers'
// messages accepted within each period; p99_ms, late (accepted after the
// period's end) and fails (refused or timed out) count every message
// started in the flood, p99_ms a failed one at the timeout. single_rate is
// single_ok/singles (1 with none); held_* are over the flood's samples.
// base_cpu_us and flood_cpu_us, with -sid, are the CPU time the Postfix
// instance and sluice spent per known peer's message accepted within the
// calm and within the flood: what the flood adds to each message, less
// noisy than a rate on shared CPUs.
func (r result) line() string {
	bm := float64(r.baseOK) / r.base.Seconds()
	fm := float64(r.floodOK) / r.flood.Seconds()
	good := 0.0
	if bm > 0 {
		good = fm / bm
	}
	rate := 1.0
	if r.singleN > 0 {
		rate = float64(r.singleOK) / float64(r.singleN)
	}
	var hmed, hmax float64
	if len(r.held) > 0 {
		s := slices.Clone(r.held)
		slices.Sort(s)
		hmed, hmax = s[len(s)/2], s[len(s)-1]
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }
	f := []string{
		"row=" + r.label,
		fmt.Sprintf("base_mps=%.2f", bm), fmt.Sprintf("flood_mps=%.2f", fm), fmt.Sprintf("goodput=%.3f", good),
		"p99_ms=" + ms(r.floodP99), fmt.Sprintf("late=%d", r.floodLate), fmt.Sprintf("fails=%d", r.floodFail),
		"base_p99_ms=" + ms(r.baseP99), fmt.Sprintf("base_fails=%d", r.baseFail),
		fmt.Sprintf("single_ok=%d", r.singleOK), fmt.Sprintf("singles=%d", r.singleN), fmt.Sprintf("single_rate=%.3f", rate),
		fmt.Sprintf("bots=%d", r.bots), fmt.Sprintf("held_median=%.0f", hmed), fmt.Sprintf("held_max=%.0f", hmax),
		fmt.Sprintf("bot_connects=%d", r.botConns), fmt.Sprintf("bot_refused=%d", r.botRefused), fmt.Sprintf("bot_dropped=%d", r.botDropped),
	}
	if r.cpuRead {
		per := func(ticks uint64, msgs int64) string {
			if msgs == 0 || r.tick == 0 {
				return "0"
			}
			return fmt.Sprintf("%.0f", float64(ticks)/r.tick*1e6/float64(msgs))
		}
		f = append(f, "base_cpu_us="+per(r.baseCPU, r.baseOK), "flood_cpu_us="+per(r.floodCPU, r.floodOK))
	}
	return strings.Join(f, " ")
}
