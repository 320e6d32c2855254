package cli

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SIGUSR1 is ignored (a deliberate difference, "unhandled-signals" in
// internal/mux/differences.go: it kills the reference): the multiplexor
// goes on serving. (SIGUSR2 upgrades in place: mux_upgrade_test.go.)
func TestMuxIgnoresUSR1(t *testing.T) {
	t.Parallel()
	bin, worker := muxBinaries(t)
	d := featStart(t, "sluice", []string{bin, "mux", "-f", worker, "-m", "1", "-x", "1"}, nil)
	featWaitStatus(t, d, `^I `)
	if err := syscall.Kill(d.pid, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	// Once no signal is pending for the process any more, a thread of it
	// has taken each: a death would have come then, in the handler.
	waitSignalsTaken(t, d.pid, syscall.SIGUSR1)
	if !alive(d.pid) {
		t.Fatal("sluice mux died of SIGUSR1")
	}
	if r := muxQuery(t, d.main, "scan Q1 /tmp\n"); !strings.HasPrefix(r, "ok") {
		t.Errorf("scan after the signals: %q", r)
	}
}

// waitSignalsTaken waits until none of sigs is pending for process pid
// (ShdPnd in /proc/pid/status: sent, not yet delivered to a thread).
func waitSignalsTaken(t *testing.T, pid int, sigs ...syscall.Signal) {
	t.Helper()
	var mask uint64
	for _, s := range sigs {
		mask |= 1 << (uint(s) - 1)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return // gone: the caller sees it
		}
		var pending uint64
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "ShdPnd:"); ok {
				pending, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			}
		}
		if pending&mask == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("signals %v still pending for %d after 10 s (ShdPnd %x)", sigs, pid, pending)
		}
	}
}
