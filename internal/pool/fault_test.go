package pool_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/internal/pool"
)

// busyPID waits until a worker is busy and returns its pid.
func busyPID(t *testing.T, p *pool.Pool) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		snap, ok := p.Snapshot()
		if !ok {
			t.Fatal("pool stopped")
		}
		for _, s := range snap.Slots {
			if s.State == pool.Busy && s.PID > 0 {
				return s.PID
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no busy worker; states %s", states(t, p))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWorkerKilledMidScan: a worker killed with SIGKILL in the middle of
// a scan fails only that request (no response), its slot is reaped, and
// the pool goes on serving with new processes; requests on the other
// worker are not disturbed.
func TestWorkerKilledMidScan(t *testing.T) {
	cfg := baseConfig()
	cfg.MinWorkers, cfg.MaxWorkers = 2, 2
	cfg.BusyTimeout = 30 * time.Second // the kill, not the timeout, must end the scan
	p := start(t, cfg)
	waitStates(t, p, "II")
	for round := range 3 {
		res := make(chan pool.Result, 1)
		go func() {
			res <- doReq(p, pool.Request{Line: "sleep 20000", Queue: true})
		}()
		victim := busyPID(t, p)
		// The other worker answers while its neighbour scans.
		wantReply(t, do(t, p, "scan Q"+strconv.Itoa(round)+" /tmp"), "ok\n")
		t0 := time.Now()
		if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		r := <-res
		if !errors.Is(r.Err, pool.ErrNoResponse) {
			t.Fatalf("round %d: killed worker's request: reply %q err %v, want ErrNoResponse", round, r.Reply, r.Err)
		}
		t.Logf("round %d: request failed %v after the SIGKILL", round, time.Since(t0).Round(time.Millisecond))
		// The dead process is reaped (not left a zombie) and replaced.
		deadline := time.Now().Add(10 * time.Second)
		for {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", victim))
			if err != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("killed worker %d not reaped: %s", victim, b)
			}
			time.Sleep(10 * time.Millisecond)
		}
		for range 4 {
			wantReply(t, do(t, p, "scan again /tmp"), "ok\n")
		}
	}
	waitCount(t, p, pool.Idle, 2)
}

// TestWorkerHungAmongBusyOnes: a worker that never answers is killed at
// the busy timeout while the rest of the pool keeps answering; the
// request that hung gets ErrBusyTimeout, the others their replies.
func TestWorkerHungAmongBusyOnes(t *testing.T) {
	cfg := baseConfig()
	cfg.MinWorkers, cfg.MaxWorkers = 1, 3
	cfg.BusyTimeout = 500 * time.Millisecond
	cfg.SlewTime = 10 * time.Millisecond
	p := start(t, cfg)
	hung := make(chan pool.Result, 1)
	go func() { hung <- doReq(p, pool.Request{Line: "hangterm", Queue: true}) }()
	busyPID(t, p)
	for range 20 {
		wantReply(t, do(t, p, "sleep 10"), "slept 10\n")
	}
	r := <-hung
	if !errors.Is(r.Err, pool.ErrBusyTimeout) {
		t.Fatalf("hung worker: %+v", r)
	}
	wantReply(t, do(t, p, "after"), "echo \"after\"\n")
}

// TestStderrFloodBounded: a worker writing tens of MB to stderr while it
// works neither blocks (its replies come) nor makes the pool hold the
// flood in memory: the Go heap grows by far less than what was written.
// Both paths are flooded: stderr discarded (the default) and every line
// logged (-l).
func TestStderrFloodBounded(t *testing.T) {
	for _, tc := range []struct {
		logged bool
		mb     int
	}{{false, 64}, {true, 4}} {
		t.Run(fmt.Sprintf("logged=%v", tc.logged), func(t *testing.T) {
			cfg := baseConfig()
			cfg.MinWorkers, cfg.MaxWorkers = 1, 1
			cfg.BusyTimeout = 60 * time.Second
			cfg.LogStderr = tc.logged
			var logged countWriter
			cfg.Events = func(ev pool.Event) {
				if ev.Kind == pool.EvStderr {
					logged.Write([]byte(ev.Line))
				}
			}
			p := start(t, cfg)
			wantReply(t, do(t, p, "x"), "echo \"x\"\n")
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			t0 := time.Now()
			for range 4 {
				wantReply(t, do(t, p, fmt.Sprintf("flood %d", tc.mb<<20/4)), "flooded\n")
			}
			took := time.Since(t0)
			wantReply(t, do(t, p, "x"), "echo \"x\"\n")
			runtime.GC()
			runtime.ReadMemStats(&after)
			grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
			t.Logf("%d MB of worker stderr in %v: live heap grew by %d KB; %d KB of log written", tc.mb, took.Round(time.Millisecond), grew>>10, logged.n()>>10)
			if tc.logged && logged.n() < int64(tc.mb)<<19 {
				t.Fatalf("%d KB of stderr lines reached Config.Events, want most of the %d MB written", logged.n()>>10, tc.mb)
			}
			if grew > 16<<20 {
				t.Fatalf("live heap grew by %d MB after a %d MB stderr flood", grew>>20, tc.mb)
			}
		})
	}
}

type countWriter struct {
	mu    sync.Mutex
	bytes int64
}

func (w *countWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.bytes += int64(len(p))
	w.mu.Unlock()
	return len(p), nil
}

func (w *countWriter) n() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.bytes
}

// TestWorkersRunWithoutShell: the worker is executed directly (its
// parent is this process, its executable the configured program) and its
// arguments arrive byte for byte, shell metacharacters included; nothing
// a shell would do with them happens.
func TestWorkersRunWithoutShell(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "shell-ran")
	cfg := baseConfig()
	cfg.MinWorkers, cfg.MaxWorkers = 1, 1
	args := []string{"-f", "$(touch " + marker + ")", "`touch " + marker + "`", "; touch " + marker, "a b*", "|", "&&", "'\""}
	cfg.Args = args
	p := start(t, cfg)
	want := fmt.Sprintf("args %q\n", append([]string{"fakeworker"}, args...))
	wantReply(t, do(t, p, "args"), want)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a shell interpreted the worker's arguments")
	}
	var pid int
	r := do(t, p, "pid")
	if _, err := fmt.Sscanf(string(r.Reply), "pid %d\n", &pid); err != nil {
		t.Fatalf("pid: %q", r.Reply)
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	if exe != fakeWorker {
		t.Errorf("worker executable %s, want %s (no shell or wrapper in between)", exe, fakeWorker)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := bytes.Cut(stat, []byte(") "))
	f := strings.Fields(string(rest))
	if len(f) < 2 || f[1] != strconv.Itoa(os.Getpid()) {
		t.Errorf("worker's parent %v, want this process %d", f, os.Getpid())
	}
}
