// Package procstat reads what the benchmark drivers measure of other
// processes from /proc: a process's CPU time in clock ticks and its
// session (/proc/PID/stat), its threads' context switches
// (/proc/PID/task/*/status), how busy the CPUs are (/proc/stat), the load
// average, and which processes belong to a session. The parsers take the
// files' bytes, so that malformed input is tested without a process.
package procstat

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Stat is what the drivers use of /proc/PID/stat.
type Stat struct {
	Session      int    // field 6: the session id
	UTime, STime uint64 // fields 14 and 15: user and system time, clock ticks
	// CUTime and CSTime (fields 16 and 17) are the user and system time
	// of the children the process has waited for, in clock ticks (0 when
	// the line stops before them).
	CUTime, CSTime uint64
}

// TreeTicks is Ticks plus the time of the children the process has
// reaped: summed over a session at two moments, the difference is what
// the session spent between them, children that came and went included.
func (s Stat) TreeTicks() uint64 { return s.UTime + s.STime + s.CUTime + s.CSTime }

// Ticks is the process's CPU time, user plus system, in clock ticks.
func (s Stat) Ticks() uint64 { return s.UTime + s.STime }

// ParseStat parses the contents of /proc/PID/stat. The command name
// (field 2) is in parentheses and may hold spaces and parentheses, so the
// fields are counted from the last ")".
func ParseStat(b []byte) (Stat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || !bytes.Contains(b[:i], []byte(" (")) {
		return Stat{}, errors.New("procstat: stat has no (command)")
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3, the state
	if len(f) < 13 {
		return Stat{}, fmt.Errorf("procstat: stat has %d fields after the command, want at least 13", len(f))
	}
	sid, err := strconv.Atoi(f[3])
	if err != nil {
		return Stat{}, fmt.Errorf("procstat: session %q: %w", f[3], err)
	}
	ut, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("procstat: utime %q: %w", f[11], err)
	}
	st, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("procstat: stime %q: %w", f[12], err)
	}
	out := Stat{Session: sid, UTime: ut, STime: st}
	if len(f) >= 15 {
		if out.CUTime, err = strconv.ParseUint(f[13], 10, 64); err != nil {
			return Stat{}, fmt.Errorf("procstat: cutime %q: %w", f[13], err)
		}
		if out.CSTime, err = strconv.ParseUint(f[14], 10, 64); err != nil {
			return Stat{}, fmt.Errorf("procstat: cstime %q: %w", f[14], err)
		}
	}
	return out, nil
}

// ReadStat is ParseStat of pid's /proc/PID/stat.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(b)
}

// Ticks is pid's CPU time so far in clock ticks, 0 if it cannot be read
// (the process is gone), as the scripts counted it.
func Ticks(pid int) uint64 {
	s, err := ReadStat(pid)
	if err != nil {
		return 0
	}
	return s.Ticks()
}

// ParseSwitches sums voluntary_ctxt_switches and
// nonvoluntary_ctxt_switches in the contents of a /proc status file.
// Other lines are ignored; a switch line whose value is not a number is
// an error.
func ParseSwitches(b []byte) (uint64, error) {
	var n uint64
	for line := range strings.SplitSeq(string(b), "\n") {
		name, val, ok := strings.Cut(line, ":")
		if !ok || (name != "voluntary_ctxt_switches" && name != "nonvoluntary_ctxt_switches") {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(val), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("procstat: %s %q: %w", name, strings.TrimSpace(val), err)
		}
		n += v
	}
	return n, nil
}

// Switches is the context switches of pid's live threads so far, summed
// over /proc/PID/task/*/status; a thread that has exited is not counted.
// 0 if none can be read.
func Switches(pid int) uint64 {
	var n uint64
	for _, v := range ThreadSwitches(pid) {
		n += v
	}
	return n
}

// CPUTimes is the first line of /proc/stat: all CPUs' time so far, in
// clock ticks, and the idle part of it (idle and iowait).
type CPUTimes struct{ Total, Idle uint64 }

// ParseCPUTimes parses the "cpu" line of /proc/stat (the first line of b).
func ParseCPUTimes(b []byte) (CPUTimes, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return CPUTimes{}, fmt.Errorf("procstat: %q is not /proc/stat's cpu line", line)
	}
	var c CPUTimes
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return CPUTimes{}, fmt.Errorf("procstat: cpu field %d %q: %w", i+1, s, err)
		}
		c.Total += v
		if i == 3 || i == 4 { // idle, iowait
			c.Idle += v
		}
	}
	return c, nil
}

// BusyPercent is how busy the CPUs were from a to b, in percent of their
// capacity, rounded (0 if no time passed).
func BusyPercent(a, b CPUTimes) int {
	total := float64(b.Total) - float64(a.Total)
	if total <= 0 {
		return 0
	}
	idle := float64(b.Idle) - float64(a.Idle)
	p := 100 * (total - idle) / total
	return int(p + 0.5)
}

// CPUBusy is how busy all CPUs together were over the next d, in percent.
func CPUBusy(d time.Duration) (int, error) {
	read := func() (CPUTimes, error) {
		b, err := os.ReadFile("/proc/stat")
		if err != nil {
			return CPUTimes{}, err
		}
		return ParseCPUTimes(b)
	}
	a, err := read()
	if err != nil {
		return 0, err
	}
	time.Sleep(d)
	b, err := read()
	if err != nil {
		return 0, err
	}
	return BusyPercent(a, b), nil
}

// LoadAvg is the first three fields of /proc/loadavg ("1.00 0.50 0.25"),
// or "?" if it cannot be read.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if err != nil || len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// SessionPIDs lists the processes whose session id is sid (postfwd2's
// master, cache, policy daemon and children).
func SessionPIDs(sid int) []int {
	dirs, _ := os.ReadDir("/proc")
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if s, err := ReadStat(pid); err == nil && s.Session == sid {
			pids = append(pids, pid)
		}
	}
	return pids
}

// SessionTreeTicks is the TreeTicks of every process of session sid,
// summed: the session's CPU time so far, its reaped children's included
// (a child that exited but was not yet reaped counts as itself).
func SessionTreeTicks(sid int) uint64 {
	var n uint64
	for _, pid := range SessionPIDs(sid) {
		if s, err := ReadStat(pid); err == nil {
			n += s.TreeTicks()
		}
	}
	return n
}

// Cmdline is pid's command line with its arguments joined by spaces
// (a process may rewrite it, as postfwd2's children do), "" if gone.
func Cmdline(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// ClockTick is the clock ticks per second of /proc's times (getconf
// CLK_TCK), 100 (Linux's USER_HZ) if getconf cannot tell.
func ClockTick() float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err != nil {
		return 100
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil || v <= 0 {
		return 100
	}
	return v
}

// ThreadSwitches is the context switches so far of each of pid's live
// threads, by thread id (/proc/PID/task/*/status); empty if none can be
// read.
func ThreadSwitches(pid int) map[int]uint64 {
	dirs, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*")
	m := make(map[int]uint64, len(dirs))
	for _, d := range dirs {
		tid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(d + "/status")
		if err != nil {
			continue // the thread exited
		}
		if v, err := ParseSwitches(b); err == nil {
			m[tid] = v
		}
	}
	return m
}

// SwitchesSince is the context switches that the threads of now made
// since before (two ThreadSwitches readings of one process): a thread
// born in between counts whole (so does one under a reused id), and one that exited in between is not
// counted (what it switched went with it), so that a process whose
// threads come and go (libmilter's, one per session) is undercounted,
// never counted below zero.
func SwitchesSince(before, now map[int]uint64) uint64 {
	var n uint64
	for tid, v := range now {
		if b, ok := before[tid]; ok && b <= v {
			n += v - b
		} else {
			n += v // born in between (a lower count under a known id: the id reused)
		}
	}
	return n
}
