package pool_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/pool"
	"sluice/internal/pool/pooltest"
)

var fakeWorker string

func TestMain(m *testing.M) { os.Exit(pooltest.Main(m, &fakeWorker)) }

func baseConfig() pool.Config {
	return pool.Config{
		Program:      fakeWorker,
		MinWorkers:   1,
		MaxWorkers:   2,
		MaxRequests:  500,
		IdleTime:     time.Hour,
		BusyTimeout:  2 * time.Second,
		CmdTimeout:   time.Second,
		SlewTime:     50 * time.Millisecond,
		QueueTimeout: time.Second,
		KillGrace:    300 * time.Millisecond,
	}
}

// start runs a pool for the test and stops it (reaping every child) at
// cleanup, checking that no worker process survives.
func start(t testing.TB, cfg pool.Config) *pool.Pool { return pooltest.Start(t, cfg) }

func do(t *testing.T, p *pool.Pool, line string) pool.Result {
	t.Helper()
	return doReq(p, pool.Request{Line: line, Queue: true})
}

// viaSubmit makes doReq use Pool.Submit, whose reply the owner reads
// itself, instead of Do (TestViaSubmit; no test here runs in parallel).
var viaSubmit bool

// doReq is Do, or with viaSubmit Submit and a wait for its done.
func doReq(p *pool.Pool, req pool.Request) pool.Result {
	if !viaSubmit {
		return p.Do(context.Background(), req)
	}
	res := make(chan pool.Result, 2)
	if !p.Submit(req, func(r pool.Result) { res <- r }) {
		return pool.Result{Err: pool.ErrClosed}
	}
	return <-res
}

func wantReply(t *testing.T, r pool.Result, want string) {
	t.Helper()
	if r.Err != nil || string(r.Reply) != want {
		t.Fatalf("got reply %q err %v, want %q", r.Reply, r.Err, want)
	}
}

func states(t *testing.T, p *pool.Pool) string {
	t.Helper()
	if err := p.CheckInvariants(); err != nil {
		t.Fatalf("pool invariants: %v", err)
	}
	snap, ok := p.Snapshot()
	if !ok {
		t.Fatal("pool stopped")
	}
	var b strings.Builder
	for _, s := range snap.Slots {
		b.WriteByte(s.State.Letter())
	}
	return b.String()
}

func waitStates(t *testing.T, p *pool.Pool, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := states(t, p)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("states %s, want %s", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestBasic(t *testing.T) {
	cfg := baseConfig()
	cfg.Args = []string{"-f", "/x/filter", "-server"}
	p := start(t, cfg)
	waitStates(t, p, "IS")
	wantReply(t, do(t, p, "hello world"), "echo \"hello world\"\n")
	wantReply(t, do(t, p, "args"), `args ["fakeworker" "-f" "/x/filter" "-server"]`+"\n")
	wantReply(t, do(t, p, "scan Q1 /tmp"), "ok\n")
	snap, _ := p.SnapshotLoad(pool.LoadQuery{Kind: pool.Scan, Back: 10})
	s := snap.Slots[0]
	if s.NumRequests != 3 || s.NumScans != 1 || snap.Msgs != 1 || s.Last != pool.Scan || snap.Activations != 1 {
		t.Fatalf("slot %+v msgs %d activations %d", s, snap.Msgs, snap.Activations)
	}
	if w := snap.Loads[0]; w.Count != 1 || w.AvgBusy(1) != 1 {
		t.Fatalf("scan window %+v", w)
	}
}

func TestMaxRequestsRecycles(t *testing.T) {
	cfg := baseConfig()
	cfg.MaxRequests = 2
	p := start(t, cfg)
	first := do(t, p, "pid")
	wantReply(t, do(t, p, "pid"), string(first.Reply))
	// The worker has now served 2 requests and is killed; the next request
	// gets a new process.
	third := do(t, p, "pid")
	if third.Err != nil || bytes.Equal(third.Reply, first.Reply) {
		t.Fatalf("after max requests: %q (first %q) %v", third.Reply, first.Reply, third.Err)
	}
}

func TestBusyTimeoutAndEscalation(t *testing.T) {
	cfg := baseConfig()
	cfg.BusyTimeout = 300 * time.Millisecond
	p := start(t, cfg)
	for _, cmd := range []string{"hang", "hangterm"} {
		t0 := time.Now()
		r := do(t, p, cmd)
		if !errors.Is(r.Err, pool.ErrBusyTimeout) || r.BusyWorkers != 1 {
			t.Fatalf("%s: %+v", cmd, r)
		}
		// Never before the timeout (no upper bound: machines here are noisy).
		if d := time.Since(t0); d < 250*time.Millisecond {
			t.Fatalf("%s: busy timeout after %v", cmd, d)
		}
		// hangterm ignores SIGTERM: only the SIGKILL after KillGrace ends it.
		waitStates(t, p, "IS")
		wantReply(t, do(t, p, "after"), "echo \"after\"\n")
	}
}

func TestWorkerDies(t *testing.T) {
	p := start(t, baseConfig())
	r := do(t, p, "die")
	if !errors.Is(r.Err, pool.ErrNoResponse) {
		t.Fatalf("die: %+v", r)
	}
	wantReply(t, do(t, p, "partial"), "part")
	waitCount(t, p, pool.Idle, 1)
	waitCount(t, p, pool.Stopped, 1)
	wantReply(t, do(t, p, "x"), "echo \"x\"\n")
}

func TestReplyFraming(t *testing.T) {
	p := start(t, baseConfig())
	// Two lines in one write: the second is dropped.
	wantReply(t, do(t, p, "two"), "one\n")
	wantReply(t, do(t, p, "x"), "echo \"x\"\n")
	// An overlong line is cut at 4096 bytes with no newline; its tail is
	// thrown away.
	r := do(t, p, "long 5000")
	if r.Err != nil || string(r.Reply) != strings.Repeat("x", 4096) {
		t.Fatalf("long: %d bytes %v", len(r.Reply), r.Err)
	}
	wantReply(t, do(t, p, "w"), "echo \"w\"\n")
	wantReply(t, do(t, p, "long 4095"), strings.Repeat("x", 4095)+"\n")
	// A stderr flood does not block the worker.
	wantReply(t, do(t, p, "flood 2000000"), "flooded\n")
}

func TestDesync(t *testing.T) {
	cfg := baseConfig()
	cfg.MaxWorkers = 1 // every command goes to the same worker
	cfg.LogStderr = true
	wrote := make(chan struct{}, 1)
	cfg.Events = func(ev pool.Event) {
		if ev.Kind == pool.EvStderr && ev.Line == "twosep: two written" {
			select {
			case wrote <- struct{}{}:
			default:
			}
		}
	}
	p := start(t, cfg)
	// Two separate writes: the second line answers the next command (the
	// reference's desynchronisation, kept), even though it is in the pipe
	// before that command is written: the worker says so on stderr after
	// writing it. That command's own answer comes 500 ms late, so that
	// the read finds only the stale line and the answer is left for the
	// command after it (an instant answer could be read together with the
	// stale line, and dropped with it).
	wantReply(t, do(t, p, "twosep"), "one\n")
	select {
	case <-wrote:
	case <-time.After(10 * time.Second):
		t.Fatal("twosep never wrote its second line")
	}
	wantReply(t, do(t, p, "sleep 500"), "two\n")
	wantReply(t, do(t, p, "z"), "slept 500\n")
}

func waitCount(t *testing.T, p *pool.Pool, st pool.State, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		snap, _ := p.Snapshot()
		if snap.Count(st) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("states %s: never %d %s", states(t, p), n, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestQueue(t *testing.T) {
	cfg := baseConfig()
	cfg.MaxWorkers = 1
	cfg.QueueSize = 1
	// Long enough that a loaded machine never times out the queued request
	// of the first part; the second part uses its own short timeout.
	cfg.QueueTimeout = 30 * time.Second
	p := start(t, cfg)
	waitStates(t, p, "I")
	var wg sync.WaitGroup
	results := make([]pool.Result, 2)
	wg.Add(1)
	go func() { defer wg.Done(); results[0] = do(t, p, "sleep 200") }()
	waitStates(t, p, "B")
	wg.Add(1)
	go func() { defer wg.Done(); results[1] = do(t, p, "queued") }()
	waitQueued(t, p, 1)
	if r := do(t, p, "third"); !errors.Is(r.Err, pool.ErrNoFreeWorkers) {
		t.Fatalf("queue full: %+v", r)
	}
	wg.Wait()
	wantReply(t, results[0], "slept 200\n")
	wantReply(t, results[1], "echo \"queued\"\n")

	// A request that waits longer than the queue timeout.
	cfg.QueueTimeout = 300 * time.Millisecond
	p = start(t, cfg)
	waitStates(t, p, "I")
	wg.Add(1)
	go func() { defer wg.Done(); results[0] = do(t, p, "sleep 3000") }()
	waitStates(t, p, "B")
	t0 := time.Now()
	if r := do(t, p, "late"); !errors.Is(r.Err, pool.ErrQueueTimeout) {
		t.Fatalf("queue timeout: %+v", r)
	}
	if d := time.Since(t0); d < 250*time.Millisecond {
		t.Fatalf("queue timeout after %v", d)
	}
	// Not queueable: refused at once.
	if r := doReq(p, pool.Request{Line: "map a b"}); !errors.Is(r.Err, pool.ErrNoFreeWorkers) {
		t.Fatalf("map while busy: %+v", r)
	}
	wg.Wait()
}

// A request queued while the only slot's worker is being killed is
// served once that worker is reaped and the slot is free again, not left
// to its queue timeout (the reference serves its queue only when a worker
// finishes a command).
func TestQueueServedAfterReap(t *testing.T) {
	cfg := baseConfig()
	cfg.MaxWorkers = 1
	cfg.MaxRequests = 1
	cfg.QueueSize = 4
	cfg.QueueTimeout = 30 * time.Second
	// A killed worker lingers after its stdin closes until the SIGTERM
	// that follows KillGrace, so the second request finds the slot Killed.
	cfg.Env = append(os.Environ(), "FAKEWORKER_LINGER=1")
	cfg.KillGrace = 2 * time.Second
	p := start(t, cfg)
	waitStates(t, p, "I")
	first := do(t, p, "pid")
	if first.Err != nil {
		t.Fatalf("first request: %v", first.Err)
	}
	waitStates(t, p, "K")
	second := do(t, p, "pid")
	if second.Err != nil {
		t.Fatalf("request queued while the worker was being killed: %v", second.Err)
	}
	if bytes.Equal(first.Reply, second.Reply) {
		t.Fatalf("both requests answered by the same worker (%q): the first should have been recycled", first.Reply)
	}
}

// A worker that cannot be started when a slot comes free leaves the
// queued request waiting (not failed with "Unable to activate worker"),
// and the bring-up that starts one later serves it. That it still waits
// is read after two failed starts (the reap's and a bring-up's), each of
// which would have ended it.
func TestQueueWaitsOutFailedStart(t *testing.T) {
	prog := filepath.Join(t.TempDir(), "worker")
	b, err := os.ReadFile(fakeWorker)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prog, b, 0o755); err != nil {
		t.Fatal(err)
	}
	var failed atomic.Int32
	more := make(chan struct{}, 1)
	cfg := baseConfig()
	cfg.Program = prog
	cfg.MaxWorkers = 1
	cfg.MaxRequests = 1
	cfg.QueueSize = 4
	cfg.QueueTimeout = 30 * time.Second
	cfg.KillGrace = 2 * time.Second
	cfg.Env = append(os.Environ(), "FAKEWORKER_LINGER=1")
	cfg.Events = func(ev pool.Event) {
		if ev.Kind == pool.EvStartFailed {
			failed.Add(1)
			select {
			case more <- struct{}{}:
			default:
			}
		}
	}
	p := start(t, cfg)
	waitStates(t, p, "I")
	if r := do(t, p, "pid"); r.Err != nil {
		t.Fatal(r.Err)
	}
	waitStates(t, p, "K")
	// From now on no worker can start.
	if err := os.Chmod(prog, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan pool.Result, 1)
	go func() { done <- do(t, p, "queued") }()
	waitQueued(t, p, 1)
	// The killed worker is reaped, its slot stops, no worker starts: the
	// start for the queued request fails, then a bring-up's.
	waitStates(t, p, "S")
	for deadline := time.After(10 * time.Second); failed.Load() < 2; {
		select {
		case <-more:
		case <-deadline:
			t.Fatalf("%d failed starts in 10 s, want 2", failed.Load())
		}
	}
	if snap, _ := p.Snapshot(); snap.Queued != 1 {
		t.Fatalf("after %d failed starts: %d queued, want the request still queued", failed.Load(), snap.Queued)
	}
	if err := os.Chmod(prog, 0o755); err != nil {
		t.Fatal(err)
	}
	wantReply(t, <-done, "echo \"queued\"\n")
}

func waitQueued(t *testing.T, p *pool.Pool, n int) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if snap, _ := p.Snapshot(); snap.Queued == n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("queue never reached %d", n)
}

func TestDomainLimit(t *testing.T) {
	cfg := baseConfig()
	cfg.MaxWorkers = 3
	cfg.DomainLimit = 1
	p := start(t, cfg)
	done := make(chan pool.Result)
	go func() { done <- do(t, p, "recipok <u@slow.example> <s@x>") }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		snap, _ := p.Snapshot()
		if snap.BusyWith(pool.RecipOK) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("recipok never busy")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if r := do(t, p, "recipok <v@SLOW.example> <s@x>"); !errors.Is(r.Err, pool.ErrDomainLimit) {
		t.Fatalf("same domain: %+v", r)
	}
	wantReply(t, do(t, p, "recipok <w@other.example> <s@x>"), "ok 1 ok 250 2.1.0 0\n")
	wantReply(t, <-done, "ok 1 ok 250 2.1.0 0\n")
}

func TestActivationSpacing(t *testing.T) {
	cfg := baseConfig()
	cfg.ActivationSpacing = time.Hour
	p := start(t, cfg)
	waitStates(t, p, "IS")
	done := make(chan pool.Result)
	go func() { done <- do(t, p, "sleep 300") }()
	waitStates(t, p, "BS")
	if r := do(t, p, "x"); !errors.Is(r.Err, pool.ErrActivate) {
		t.Fatalf("within -W: %+v", r)
	}
	wantReply(t, <-done, "slept 300\n")
}

func TestRereadAndIdleTimeout(t *testing.T) {
	cfg := baseConfig()
	cfg.MaxWorkers = 3
	cfg.IdleTime = 300 * time.Millisecond
	p := start(t, cfg)
	before := do(t, p, "pid")
	p.Reread()
	waitCount(t, p, pool.Idle, 1)
	waitCount(t, p, pool.Stopped, 2)
	after := do(t, p, "pid")
	if bytes.Equal(before.Reply, after.Reply) {
		t.Fatalf("reread kept the worker: %q", after.Reply)
	}
	// Three busy at once, then idle: the idle timer cuts back to min.
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); do(t, p, "sleep 150") }()
	}
	wg.Wait()
	waitCount(t, p, pool.Stopped, 2)
	waitCount(t, p, pool.Idle, 1)
}

func TestMinWorkersSlowStart(t *testing.T) {
	cfg := baseConfig()
	cfg.MinWorkers = 3
	cfg.MaxWorkers = 4
	cfg.SlewTime = 200 * time.Millisecond
	p := start(t, cfg)
	if got := states(t, p); got != "ISSS" {
		t.Fatalf("at start: %s", got)
	}
	waitStates(t, p, "IISS")
	waitStates(t, p, "IIIS")
	// A worker that dies is replaced by the bring-up logic.
	if r := do(t, p, "die"); !errors.Is(r.Err, pool.ErrNoResponse) {
		t.Fatalf("die: %+v", r)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		snap, _ := p.Snapshot()
		if snap.Count(pool.Idle) == 3 && snap.Activations == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not replaced: %s, %d activations", states(t, p), snap.Activations)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestBadProgram(t *testing.T) {
	if _, err := pool.New(pool.Config{Program: "relative"}); err == nil {
		t.Fatal("relative program accepted")
	}
	cfg := baseConfig()
	cfg.Program = "/nonexistent/worker"
	p := start(t, cfg)
	if r := do(t, p, "x"); !errors.Is(r.Err, pool.ErrActivate) {
		t.Fatalf("missing program: %+v", r)
	}
}

func TestRecipokDomain(t *testing.T) {
	for line, want := range map[string]string{"recipok <u@Slow.example> x": "Slow.example", "recipok a@b": "b", "recipok <x> y": ""} {
		if got, _ := pool.RecipokDomain(line); got != want {
			t.Errorf("domain of %q = %q, want %q", line, got, want)
		}
	}
}
