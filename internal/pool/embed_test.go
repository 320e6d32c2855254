package pool_test

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/internal/pool"
)

// embedConfig is a pool of two workers of testdata/embworker.pl with -E.
func embedConfig(t *testing.T) pool.Config {
	t.Helper()
	if _, err := exec.LookPath("perl"); err != nil {
		t.Skip("no perl")
	}
	prog, err := filepath.Abs("testdata/embworker.pl")
	if err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig()
	cfg.Program, cfg.Args, cfg.Embed = prog, []string{"-server"}, true
	cfg.MinWorkers, cfg.MaxWorkers = 2, 2
	return cfg
}

// line is the reply to line on a worker, without its newline.
func line(t *testing.T, p *pool.Pool, l string) string {
	t.Helper()
	r := do(t, p, l)
	if r.Err != nil {
		t.Fatalf("%s: %v", l, r.Err)
	}
	return strings.TrimSuffix(string(r.Reply), "\n")
}

// TestEmbedForksCompiledWorkers: with Embed, every worker is forked from
// one perl that compiled the program (the pid that ran its top level is
// the same for all, and none of theirs), in -embserver mode; the workers
// are the pool's own (their pids are the slots'), and a reread brings
// workers from a new perl.
func TestEmbedForksCompiledWorkers(t *testing.T) {
	p := start(t, embedConfig(t))
	waitStates(t, p, "II")
	snap, _ := p.Snapshot()
	pids := map[string]bool{}
	for _, s := range snap.Slots {
		pids[strconv.Itoa(s.PID)] = true
	}
	compiled := line(t, p, "compiled")
	if pids[compiled] {
		t.Fatalf("the program was compiled by worker %s, want by the zygote", compiled)
	}
	if m := line(t, p, "mode"); m != "-embserver" {
		t.Fatalf("mode %q, want -embserver", m)
	}
	if pid := line(t, p, "pid"); !pids[pid] {
		t.Fatalf("a worker's pid %s is not a slot's %v", pid, pids)
	}
	// Both workers at once: both forked from the same zygote.
	var wg sync.WaitGroup
	got := make([]string, 2)
	for i := range got {
		wg.Add(1)
		go func() { defer wg.Done(); got[i] = line(t, p, "compiled") }()
	}
	wg.Wait()
	if got[0] != compiled || got[1] != compiled {
		t.Fatalf("compiled by %v, want %s for both", got, compiled)
	}
	p.Reread()
	waitFor(t, "workers of the new generation", func() bool {
		snap, _ := p.Snapshot()
		for _, s := range snap.Slots {
			if s.State != pool.Idle || pids[strconv.Itoa(s.PID)] {
				return false
			}
		}
		return true
	})
	if again := line(t, p, "compiled"); again == compiled {
		t.Fatalf("after a reread the workers still come from zygote %s", compiled)
	}
}

// TestEmbedFallsBack: a program perl cannot compile as the zygote makes
// the pool start its workers as without Embed, with an EvEmbedFailed
// event.
func TestEmbedFallsBack(t *testing.T) {
	cfg := embedConfig(t)
	cfg.Program = fakeWorker // not Perl
	var mu sync.Mutex
	var failed []pool.Event
	cfg.Events = func(ev pool.Event) {
		if ev.Kind == pool.EvEmbedFailed {
			mu.Lock()
			failed = append(failed, ev)
			mu.Unlock()
		}
	}
	p := start(t, cfg)
	waitStates(t, p, "II")
	wantReply(t, do(t, p, "hello"), "echo \"hello\"\n")
	mu.Lock()
	defer mu.Unlock()
	if len(failed) != 1 || failed[0].Err == nil {
		t.Fatalf("EvEmbedFailed events %+v, want one with its error", failed)
	}
}

// waitFor waits up to 10 s for cond.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s in 10 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
