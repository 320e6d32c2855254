package pool_test

import (
	"context"
	"errors"
	"os"
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

// TestEmbedCompileDoesNotHoldTheOwner: after a reread the new zygote
// compiles the program (held here until the test lets it finish) while
// the pool goes on serving: status is answered, a worker busy across the
// reread has its reply read and delivered, a request that finds no free
// worker is refused at once; the request that started a worker is served
// by it once the compile is done.
func TestEmbedCompileDoesNotHoldTheOwner(t *testing.T) {
	cfg := embedConfig(t)
	dir := t.TempDir()
	gate, held := filepath.Join(dir, "gate"), filepath.Join(dir, "held")
	release := func(f string) {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	release(gate)
	cfg.Env = append(os.Environ(), "EMB_HOLD="+gate)
	cfg.MinWorkers, cfg.MaxWorkers = 1, 2
	cfg.BusyTimeout = time.Minute
	p := start(t, cfg)
	// Registered after start: it runs first, so that a compile still
	// held does not outlive the test.
	t.Cleanup(func() { release(gate); release(held) })
	waitStates(t, p, "IS")
	for _, f := range []string{gate, gate + ".compiling"} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}

	// A worker busy across the reread.
	heldRes := make(chan pool.Result, 1)
	go func() { heldRes <- p.Do(context.Background(), pool.Request{Line: "hold " + held}) }()
	waitStates(t, p, "BS")
	p.Reread()
	// A request for a worker of the new generation: it waits for the
	// compile.
	pingRes := make(chan pool.Result, 1)
	go func() { pingRes <- p.Do(context.Background(), pool.Request{Line: "ping"}) }()
	waitFor(t, "compile of the new generation", func() bool {
		_, err := os.Stat(gate + ".compiling")
		return err == nil
	})

	within := func(what string, f func()) time.Duration {
		t.Helper()
		t0 := time.Now()
		done := make(chan struct{})
		go func() { f(); close(done) }()
		select {
		case <-done:
			return time.Since(t0)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer in 10 s while the filter compiles", what)
			return 0
		}
	}
	var snap pool.Snapshot
	lat := within("status", func() { snap, _ = p.Snapshot() })
	t.Logf("status answered in %v during the compile", lat)
	if snap.Count(pool.Busy) != 1 {
		t.Errorf("status during the compile: %+v, want the held worker busy", snap.Slots)
	}
	var busy pool.Result
	within("a request with no free worker", func() { busy = p.Do(context.Background(), pool.Request{Line: "pong"}) })
	if !errors.Is(busy.Err, pool.ErrNoFreeWorkers) {
		t.Errorf("a request with every slot taken: %q %v, want ErrNoFreeWorkers", busy.Reply, busy.Err)
	}
	release(held)
	within("the busy worker's reply", func() { wantReply(t, <-heldRes, "held\n") })
	select {
	case r := <-pingRes:
		t.Fatalf("ping answered %q %v before the compile ended", r.Reply, r.Err)
	default:
	}
	release(gate)
	within("the request that started a worker", func() { wantReply(t, <-pingRes, "echo ping\n") })
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
