package cli

import (
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// -i never takes the running workers below -m (the reference's idle pass
// counts its own kills): with -m 1 -x 3 -w 1 -i 10 and three workers busy
// at once then idle, both multiplexors write two "Idle timeout" kills
// (each with nworkers=3: a killed worker counts until it is reaped), keep
// one worker running, and start none again.
func TestMuxIdleTimeoutKeepsMinVsReference(t *testing.T) {
	if testing.Short() {
		t.Skip("the idle timer runs every 10 s")
	}
	t.Parallel()
	sl, ref := featPair(t, []string{"-f", "WORKER", "-m", "1", "-x", "3", "-w", "1", "-i", "10", "-t", "SPOOL/stats", "-u"}, nil)
	killRe := regexp.MustCompile(`(?m)^.* KillWorker worker=\d+ nworkers=(\d+) nbusy=0 .*reason="Idle timeout"$`)
	run := func(d *featDaemon) {
		featWaitStatus(t, d, `^ISS `)
		var wg sync.WaitGroup
		for i, ms := range []string{"1400", "1200", "1000"} {
			wg.Go(func() { muxQuery(t, d.main, "sleep "+ms+"\n") })
			if i < 2 { // busy before the next comes: each takes a worker of its own
				featWaitStatus(t, d, `^[^B ]*`+strings.Repeat(`B[^B ]*`, i+1)+` `)
			}
		}
		wg.Wait()
		featWaitStatus(t, d, `^(ISS|SIS|SSI) `)
		// Longer than -w: a bring-up after the kills would show by now.
		time.Sleep(2500 * time.Millisecond)
		featWaitStatus(t, d, `^(ISS|SIS|SSI) `)
		b, err := os.ReadFile(d.spool + "/stats")
		if err != nil {
			t.Fatalf("%s: %v", d.name, err)
		}
		stats := string(b)
		kills := killRe.FindAllStringSubmatch(stats, -1)
		if len(kills) != 2 {
			t.Errorf("%s: %d idle kills, want 2:\n%s", d.name, len(kills), stats)
		}
		for _, k := range kills {
			if k[1] != "3" {
				t.Errorf("%s: idle kill with nworkers=%s, want 3:\n%s", d.name, k[1], stats)
			}
		}
		if n := strings.Count(stats, " StartWorker "); n != 3 {
			t.Errorf("%s: %d StartWorker records, want 3:\n%s", d.name, n, stats)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { run(sl) })
	if ref != nil {
		wg.Go(func() { run(ref) })
	}
	wg.Wait()
}
