package procstat

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestParseStat(t *testing.T) {
	tail := " S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 567 0 0 20 0 1 0 100 1000 10"
	for _, tc := range []struct {
		name string
		in   string
		want Stat
		bad  bool
	}{
		{"plain", "42 (sluice)" + tail, Stat{Session: 4242, UTime: 1234, STime: 567}, false},
		{"spaces and parentheses in the name", "42 (a) b (c))" + tail, Stat{Session: 4242, UTime: 1234, STime: 567}, false},
		{"trailing newline", "42 (x)" + tail + "\n", Stat{Session: 4242, UTime: 1234, STime: 567}, false},
		{"children's times", "42 (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 567 89 10 20", Stat{Session: 4242, UTime: 1234, STime: 567, CUTime: 89, CSTime: 10}, false},
		{"cutime not a number", "42 (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 567 x9 10 20", Stat{}, true},
		{"cstime negative", "42 (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 567 89 -1 20", Stat{}, true},
		{"empty", "", Stat{}, true},
		{"no command", "42 S 1 4242" + tail, Stat{}, true},
		{"a closing parenthesis only", "42 x)" + tail, Stat{}, true},
		{"truncated", "42 (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234", Stat{}, true},
		{"utime not a number", "42 (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 12a4 567 0", Stat{}, true},
		{"stime negative", "42 (x) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 -5 0", Stat{}, true},
		{"session not a number", "42 (x) S 1 4242 sid 0 -1 4194560 100 0 0 0 1234 567 0", Stat{}, true},
		{"binary garbage", "\x00\xff(\x01)\x02", Stat{}, true},
	} {
		got, err := ParseStat([]byte(tc.in))
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("%s: ParseStat = %+v, %v", tc.name, got, err)
		}
	}
	if got := (Stat{UTime: 3, STime: 4}).Ticks(); got != 7 {
		t.Errorf("Ticks = %d", got)
	}
	if got := (Stat{UTime: 3, STime: 4, CUTime: 5, CSTime: 6}).TreeTicks(); got != 18 {
		t.Errorf("TreeTicks = %d", got)
	}
}

func TestReadStatSelf(t *testing.T) {
	s, err := ReadStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// 0 is a real answer: the session's leader lives outside this pid
	// namespace (a container's CI runner), so only a negative id is wrong.
	if s.Session < 0 {
		t.Errorf("own session %d", s.Session)
	}
	if !slices.Contains(SessionPIDs(s.Session), os.Getpid()) {
		t.Errorf("SessionPIDs(%d) does not list this process", s.Session)
	}
	// A child that starts its own session leads it: its session id is its pid.
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	cs, err := ReadStat(cmd.Process.Pid)
	if err != nil || cs.Session != cmd.Process.Pid {
		t.Errorf("child %d: session %d, %v", cmd.Process.Pid, cs.Session, err)
	}
	if got := SessionPIDs(cmd.Process.Pid); !slices.Equal(got, []int{cmd.Process.Pid}) {
		t.Errorf("SessionPIDs(child) = %v", got)
	}
	if Ticks(-1) != 0 || Switches(-1) != 0 {
		t.Error("a process that does not exist has CPU time or switches")
	}
	if Switches(os.Getpid()) == 0 {
		t.Error("this process has no context switches")
	}
	if !strings.Contains(Cmdline(os.Getpid()), "procstat") {
		t.Errorf("Cmdline = %q", Cmdline(os.Getpid()))
	}
}

func TestParseSwitches(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want uint64
		bad  bool
	}{
		{"both", "Name:\tx\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n", 15, false},
		{"none", "Name:\tx\nState:\tS (sleeping)\n", 0, false},
		{"empty", "", 0, false},
		{"no newline at the end", "voluntary_ctxt_switches:\t7", 7, false},
		{"not a number", "voluntary_ctxt_switches:\tmany\n", 0, true},
		{"empty value", "nonvoluntary_ctxt_switches:\n", 0, true},
		{"negative", "voluntary_ctxt_switches:\t-1\n", 0, true},
		{"a look-alike name is ignored", "xvoluntary_ctxt_switches:\tbad\n", 0, false},
	} {
		got, err := ParseSwitches([]byte(tc.in))
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("%s: ParseSwitches = %d, %v", tc.name, got, err)
		}
	}
}

func TestParseCPUTimes(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want CPUTimes
		bad  bool
	}{
		{"plain", "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4 5\n", CPUTimes{Total: 1000, Idle: 850}, false},
		{"old kernel: four fields", "cpu 10 20 30 40\n", CPUTimes{Total: 100, Idle: 40}, false},
		{"empty", "", CPUTimes{}, true},
		{"not the cpu line", "intr 1 2 3 4 5\n", CPUTimes{}, true},
		{"a per-CPU line", "cpu0 1 2 3 4 5\n", CPUTimes{}, true},
		{"too short", "cpu 1 2\n", CPUTimes{}, true},
		{"not a number", "cpu 1 2 x 4 5\n", CPUTimes{}, true},
	} {
		got, err := ParseCPUTimes([]byte(tc.in))
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("%s: ParseCPUTimes = %+v, %v", tc.name, got, err)
		}
	}
}

func TestBusyPercent(t *testing.T) {
	for _, tc := range []struct {
		a, b CPUTimes
		want int
	}{
		{CPUTimes{1000, 900}, CPUTimes{2000, 1800}, 10},
		{CPUTimes{1000, 900}, CPUTimes{1200, 900}, 100},
		{CPUTimes{1000, 900}, CPUTimes{1000, 900}, 0}, // no time passed
		{CPUTimes{1000, 900}, CPUTimes{500, 400}, 0},  // counters went back
		{CPUTimes{0, 0}, CPUTimes{200, 199}, 1},       // 0.5 rounds up
		{CPUTimes{0, 0}, CPUTimes{1000, 996}, 0},      // 0.4 rounds down
	} {
		if got := BusyPercent(tc.a, tc.b); got != tc.want {
			t.Errorf("BusyPercent(%+v, %+v) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestHostReadings(t *testing.T) {
	if f := strings.Fields(LoadAvg()); len(f) != 3 {
		t.Errorf("LoadAvg = %q", LoadAvg())
	}
	if hz := ClockTick(); hz <= 0 {
		t.Errorf("ClockTick = %v", hz)
	}
}

// SwitchesSince counts the live threads' switches since the first
// reading: a new thread whole, a gone one not at all, never below zero.
func TestSwitchesSince(t *testing.T) {
	for _, tc := range []struct {
		name        string
		before, now map[int]uint64
		want        uint64
	}{
		{"same threads", map[int]uint64{1: 10, 2: 5}, map[int]uint64{1: 15, 2: 7}, 7},
		{"a thread born", map[int]uint64{1: 10}, map[int]uint64{1: 12, 3: 4}, 6},
		{"a thread gone", map[int]uint64{1: 10, 2: 500}, map[int]uint64{1: 12}, 2},
		{"a thread id reused by a younger thread", map[int]uint64{1: 10, 2: 500}, map[int]uint64{1: 12, 2: 3}, 5},
		{"nothing read", nil, nil, 0},
	} {
		if got := SwitchesSince(tc.before, tc.now); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
