package cli

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// SIGUSR1 and SIGUSR2 are ignored (a deliberate difference,
// "unhandled-signals" in internal/mux/differences.go: they kill the
// reference): the multiplexor goes on serving.
func TestMuxIgnoresUSRSignals(t *testing.T) {
	t.Parallel()
	bin, worker := muxBinaries(t)
	d := featStart(t, "sluice", []string{bin, "mux", "-f", worker, "-m", "1", "-x", "1"}, nil)
	featWaitStatus(t, d, `^I `)
	for _, sig := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2} {
		if err := syscall.Kill(d.pid, sig); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if !alive(d.pid) {
		t.Fatal("sluice mux died of SIGUSR1 or SIGUSR2")
	}
	if r := muxQuery(t, d.main, "scan Q1 /tmp\n"); !strings.HasPrefix(r, "ok") {
		t.Errorf("scan after the signals: %q", r)
	}
}
