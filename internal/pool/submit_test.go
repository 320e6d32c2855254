package pool_test

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/pool"
	"sluice/internal/pool/pooltest"
)

// TestViaSubmit runs the pool's behaviour tests again with every request
// made through Submit, so that the owner holds each call's I/O (reads
// the reply from its reactor) instead of the client: framing, busy
// timeouts, dying and killed workers, the queue, recycling, notifications
// and stats must come out the same.
func TestViaSubmit(t *testing.T) {
	viaSubmit = true
	t.Cleanup(func() { viaSubmit = false })
	for _, tc := range []struct {
		name string
		f    func(*testing.T)
	}{
		{"Basic", TestBasic},
		{"MaxRequestsRecycles", TestMaxRequestsRecycles},
		{"BusyTimeoutAndEscalation", TestBusyTimeoutAndEscalation},
		{"WorkerDies", TestWorkerDies},
		{"ReplyFraming", TestReplyFraming},
		{"Desync", TestDesync},
		{"Queue", TestQueue},
		{"QueueServedAfterReap", TestQueueServedAfterReap},
		{"DomainLimit", TestDomainLimit},
		{"RereadAndIdleTimeout", TestRereadAndIdleTimeout},
		{"WorkerKilledMidScan", TestWorkerKilledMidScan},
		{"WorkerHungAmongBusyOnes", TestWorkerHungAmongBusyOnes},
		{"StderrFloodBounded", TestStderrFloodBounded},
		{"NotificationOrder", TestNotificationOrder},
		{"BareScanIsGeneric", TestBareScanIsGeneric},
		{"LastKindSurvivesReap", TestLastKindSurvivesReap},
	} {
		t.Run(tc.name, tc.f)
	}
}

// TestSubmitDoneOnce: under concurrent submissions to fewer workers than
// requests (some queued, some refused), every done is called exactly once,
// on the owner, whether the call was answered, refused or ended by the
// pool's stop; and Submit after the stop reports false.
func TestSubmitDoneOnce(t *testing.T) {
	cfg := baseConfig()
	cfg.MaxWorkers, cfg.QueueSize = 2, 3
	p, stop := pooltest.Run(t, cfg)
	const n = 40
	var calls [n]atomic.Int32
	var wg sync.WaitGroup
	var answered, refused atomic.Int32
	for i := range n {
		wg.Add(1)
		line := "x"
		if i%10 == 0 {
			line = "sleep 300" // holds a worker: others queue or are refused
		}
		if !p.Submit(pool.Request{Line: line, Queue: true}, func(r pool.Result) {
			if calls[i].Add(1) == 1 {
				defer wg.Done()
			}
			switch {
			case r.Err == nil:
				answered.Add(1)
			case errors.Is(r.Err, pool.ErrNoFreeWorkers), errors.Is(r.Err, pool.ErrClosed):
				refused.Add(1)
			default:
				t.Errorf("request %d: %v", i, r.Err)
			}
		}) {
			t.Fatalf("Submit %d: pool stopped", i)
		}
	}
	wg.Wait()
	if answered.Load() == 0 {
		t.Fatal("no request answered")
	}
	// One more in flight when the pool stops ends with ErrClosed.
	last := make(chan pool.Result, 2)
	if !p.Submit(pool.Request{Line: "sleep 5000", Queue: true}, func(r pool.Result) { last <- r }) {
		t.Fatal("Submit before stop: pool stopped")
	}
	waitCount(t, p, pool.Busy, 1)
	stop()
	if r := <-last; !errors.Is(r.Err, pool.ErrClosed) {
		t.Fatalf("in flight at stop: %+v", r)
	}
	if p.Submit(pool.Request{Line: "x"}, func(pool.Result) { t.Error("done called after stop") }) {
		t.Fatal("Submit after stop: true")
	}
	// stop has returned with Run: the owner loop has ended, what was left
	// in its inbox has been ended (drainInbox) and the pool's goroutines
	// waited for, and post refuses from now on. Nothing of the pool's can
	// call a done any more: the counts are final.
	for i := range calls {
		if c := calls[i].Load(); c != 1 {
			t.Errorf("request %d: done called %d times", i, c)
		}
	}
	if len(last) != 0 {
		t.Error("the last request's done was called twice")
	}
}

// TestOnOwnerOnce: OnOwner's function runs on the owner; posted while the
// pool stops, each message either runs or is dropped (its drop runs),
// exactly once, or OnOwner reports false.
func TestOnOwnerOnce(t *testing.T) {
	p, stop := pooltest.Run(t, baseConfig())
	got := make(chan int, 1)
	if !p.OnOwner(func(o *pool.Owner) {
		var sn pool.Snapshot
		o.SnapshotInto(&sn, nil)
		got <- len(sn.Slots)
	}, nil) {
		t.Fatal("OnOwner: pool stopped")
	}
	if n := <-got; n != 2 {
		t.Fatalf("snapshot on the owner has %d slots, want 2", n)
	}
	const n = 200
	var calls [n]atomic.Int32
	var posted [n]bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			posted[i] = p.OnOwner(func(*pool.Owner) { calls[i].Add(1) }, func() { calls[i].Add(1) })
		}
	}()
	stop()
	wg.Wait()
	// stop has returned with Run and every OnOwner has returned: each
	// message is either refused (false) or was run or dropped before Run
	// returned (drainInbox). Nothing can come later: the counts are final.
	for i := range n {
		want := int32(0)
		if posted[i] {
			want = 1
		}
		if c := calls[i].Load(); c != want {
			t.Errorf("message %d (posted %v): run or dropped %d times", i, posted[i], c)
		}
	}
}

// TestSubmitQueuedBusyTimeout: a call dispatched while the owner handles
// a reply it read itself (the queue's head, when the worker comes free)
// gets its busy timeout, with nothing else asking the pool anything: the
// timer started from the reactor's handler is armed.
func TestSubmitQueuedBusyTimeout(t *testing.T) {
	cfg := baseConfig()
	cfg.MinWorkers, cfg.MaxWorkers, cfg.QueueSize = 1, 1, 5
	cfg.BusyTimeout, cfg.QueueTimeout = 400*time.Millisecond, 30*time.Second
	p := start(t, cfg)
	first, second := make(chan pool.Result, 1), make(chan pool.Result, 1)
	if !p.Submit(pool.Request{Line: "sleep 100", Queue: true}, func(r pool.Result) { first <- r }) ||
		!p.Submit(pool.Request{Line: "hang", Queue: true}, func(r pool.Result) { second <- r }) {
		t.Fatal("Submit: pool stopped")
	}
	wantReply(t, <-first, "slept 100\n")
	select {
	case r := <-second:
		if !errors.Is(r.Err, pool.ErrBusyTimeout) {
			t.Fatalf("hang: %+v, want the busy timeout", r)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the queued call's busy timeout never came")
	}
}

// TestSubmitEndlessLineShared: while the owner reads a worker's line of
// megabytes (cut at 4096 bytes, the rest thrown away) a few reads at a
// time, another worker's request is answered.
func TestSubmitEndlessLineShared(t *testing.T) {
	viaSubmit = true
	t.Cleanup(func() { viaSubmit = false })
	p := start(t, baseConfig())
	waitStates(t, p, "IS")
	long := make(chan pool.Result, 1)
	go func() { long <- doReq(p, pool.Request{Line: "long 3000000", Queue: true}) }()
	wantReply(t, do(t, p, "x"), "echo \"x\"\n")
	if r := <-long; r.Err != nil || string(r.Reply) != strings.Repeat("x", 4096) {
		t.Fatalf("long: %d bytes %v", len(r.Reply), r.Err)
	}
}

// TestSubmitReapedThenBusyTimeout: a worker exits without a reply while a
// grandchild keeps its stdout open, and the busy timeout ends the call
// before that output ends: the slot is reaped all the same (it does not
// stay Killed) and a new worker takes its place, whether the output ends
// before the reap's one-second bound (0.6 s) or after it (3 s).
func TestSubmitReapedThenBusyTimeout(t *testing.T) {
	for _, hold := range []string{"0.6", "3"} {
		t.Run(hold, func(t *testing.T) {
			cfg := baseConfig()
			cfg.Program, cfg.Args = "/bin/sh", []string{"-c", "read l; (sleep " + hold + " &); sleep 0.2; exit 0"}
			cfg.MinWorkers, cfg.MaxWorkers, cfg.BusyTimeout = 1, 1, 500*time.Millisecond
			p := start(t, cfg)
			waitStates(t, p, "I")
			res := make(chan pool.Result, 1)
			if !p.Submit(pool.Request{Line: "x", Queue: true}, func(r pool.Result) { res <- r }) {
				t.Fatal("Submit: pool stopped")
			}
			if r := <-res; !errors.Is(r.Err, pool.ErrBusyTimeout) {
				t.Fatalf("result %+v, want the busy timeout", r)
			}
			waitStates(t, p, "I")
		})
	}
}

// TestSubmitAnswersAfterBookkeeping: a Submit call's done comes after the
// worker's return to idle has been notified (Busy -> Idle, F, Y), as the
// reference answers after it has handled the worker's reply.
func TestSubmitAnswersAfterBookkeeping(t *testing.T) {
	rec := &recorder{}
	p := startNotifying(t, rec)
	res := make(chan pool.Result, 1)
	if !p.Submit(pool.Request{Line: "x", Queue: true}, func(r pool.Result) {
		rec.notify("done")
		res <- r
	}) {
		t.Fatal("Submit: pool stopped")
	}
	wantReply(t, <-res, "echo \"x\"\n")
	got := rec.notified()
	if want := "S 0 StateChange Busy -> Idle|F 1|Y|done"; !strings.HasSuffix(got, want) {
		t.Errorf("notifications:\n got %s\nwant ...%s", got, want)
	}
}
