package mux_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/mux"
	"sluice/internal/pool"
)

// TestFormatPoolEvent pins the reference's text and level for every
// event the pool reports, with and without -l.
func TestFormatPoolEvent(t *testing.T) {
	cfg := &pool.Config{MinWorkers: 2, MaxWorkers: 8, MaxRequests: 500, IdleTime: 300 * time.Second,
		BusyTimeout: 120 * time.Second, CmdTimeout: 10 * time.Second}
	ru := &syscall.Rusage{Utime: syscall.Timeval{Sec: 1, Usec: 234567}, Stime: syscall.Timeval{Sec: 0, Usec: 5000},
		Majflt: 2, Minflt: 300, Maxrss: 4096, Inblock: 8, Oublock: 16}
	const (
		info, warn, errl, debug = slog.LevelInfo, slog.LevelWarn, slog.LevelError, slog.LevelDebug
		always, verboseOnly     = true, false
	)
	for _, tc := range []struct {
		ev     pool.Event
		always bool // logged without -l too
		level  slog.Level
		want   string // with -l
	}{
		{pool.Event{Kind: pool.EvStarted, Worker: -1, Config: cfg}, verboseOnly, info,
			"started; minWorkers=2, maxWorkers=8, maxRequests=500, maxLifetime=0, maxIdleTime=300, busyTimeout=120, clientTimeout=10"},
		{pool.Event{Kind: pool.EvStartWorker, Worker: 3, PID: 99, Running: 4, Reason: "About to perform scan"}, verboseOnly, info,
			"Starting worker 3 (pid 99) (4 running): About to perform scan"},
		{pool.Event{Kind: pool.EvActivationSpacing, Worker: 1}, verboseOnly, debug,
			"Did not start worker 1: Not enough time elapsed since last worker activation"},
		{pool.Event{Kind: pool.EvStartFailed, Worker: 1, Err: errors.New("fork: EAGAIN")}, always, errl,
			"Could not start worker 1: fork: EAGAIN"},
		{pool.Event{Kind: pool.EvKillWorker, Worker: 0, PID: 7, State: pool.Idle, Requests: 5, Age: 60, ReqAge: -1, Reason: "Idle timeout"}, verboseOnly, info,
			"Killing idle worker 0 (pid 7) req=5 age=60 req_age=-1: Idle timeout"},
		{pool.Event{Kind: pool.EvKillEscalate, Worker: 0, PID: 7, Signal: syscall.SIGTERM}, verboseOnly, info,
			"Worker 0 (pid 7) taking too long to exit; sending SIGTERM"},
		{pool.Event{Kind: pool.EvKillEscalate, Worker: 0, PID: 7, Signal: syscall.SIGKILL}, verboseOnly, info,
			"Worker 0 (pid 7) taking way too long to exit; sending SIGKILL"},
		{pool.Event{Kind: pool.EvWaitFailed, Worker: 0, PID: 7, Err: syscall.EINVAL}, always, errl,
			"wait4(7): invalid argument"},
		{pool.Event{Kind: pool.EvReaped, Worker: 2, PID: 8, Wait: syscall.WaitStatus(3 << 8), Killed: true}, verboseOnly, debug,
			"Reap: worker 2 (pid 8) exited normally with status 3"},
		{pool.Event{Kind: pool.EvReaped, Worker: 2, PID: 8, Wait: syscall.WaitStatus(syscall.SIGTERM), Killed: true}, verboseOnly, debug,
			"Reap: worker 2 (pid 8) exited due to SIGTERM/SIGKILL as expected."},
		{pool.Event{Kind: pool.EvReaped, Worker: 2, PID: 8, Wait: syscall.WaitStatus(syscall.SIGSEGV)}, verboseOnly, errl,
			"Reap: worker 2 (pid 8) exited due to signal 11 (WORKER DIED UNEXPECTEDLY)"},
		{pool.Event{Kind: pool.EvReaped, Worker: 2, PID: 8, Wait: syscall.WaitStatus(0x137f)}, verboseOnly, errl,
			"Reap: worker 2 (pid 8) exited for unknown reason (WORKER DIED UNEXPECTEDLY)"},
		{pool.Event{Kind: pool.EvResourceUsage, Worker: 2, Requests: 9, Scans: 3, Usage: ru}, verboseOnly, info,
			"Worker 2 resource usage: req=9, scans=3, user=1.234, sys=0.005, nswap=0, majflt=2, minflt=300, maxrss=4096, bi=8, bo=16"},
		{pool.Event{Kind: pool.EvNoFreeWorkers, Worker: -1}, verboseOnly, warn, "No free workers"},
		{pool.Event{Kind: pool.EvNoFreeWorkers, Worker: -1, Map: true}, always, warn, "map command failed: No free workers"},
		{pool.Event{Kind: pool.EvQueued, Worker: -1, Queued: 3}, verboseOnly, info, "All workers are busy: Queueing request (3 queued)"},
		{pool.Event{Kind: pool.EvQueueFull, Worker: -1}, verboseOnly, info, "Cannot queue request: request queue is full"},
		{pool.Event{Kind: pool.EvDomainLimit, Worker: -1, Limit: 2, Domain: "example.com"}, verboseOnly, warn,
			"Hit per-domain recipok limit (2) for domain example.com"},
		{pool.Event{Kind: pool.EvScheduling, Worker: 0, State: pool.Idle, Cmd: pool.RelayOK, Activation: 0, Last: pool.Other}, always, info,
			"Scheduling Idle worker 0 for cmdno 1 (activated=0, last=-2)"},
		{pool.Event{Kind: pool.EvScheduling, Worker: 1, State: pool.Stopped, Cmd: pool.Other, Activation: 4, Last: pool.Scan}, always, info,
			"Scheduling Stopped worker 1 for cmdno -1 (activated=4, last=0)"},
		{pool.Event{Kind: pool.EvTickSkipped, Worker: -1, Band: 2}, verboseOnly, warn, "Tick 2 skipped -- no free workers"},
		{pool.Event{Kind: pool.EvTickSkipped, Worker: 5, Band: 2}, verboseOnly, warn, "Tick 2 skipped -- unable to activate worker 5"},
		{pool.Event{Kind: pool.EvActivateFailed, Worker: 5}, verboseOnly, errl, "Unable to activate worker 5"},
		{pool.Event{Kind: pool.EvTalkError, Worker: 5, Err: errors.New("write |1: broken pipe")}, verboseOnly, errl,
			"handleWorkerReceivedCommand(5): Timeout or error: write |1: broken pipe"},
		{pool.Event{Kind: pool.EvWorkerDied, Worker: 4, OOM: true}, always, errl,
			"Worker 4 ran out of memory -- possible DoS attack due to complex MIME?"},
		{pool.Event{Kind: pool.EvStatus, Worker: -1, Counts: [4]int{1, 2, 3, 4}, Queued: 5, Msgs: 6, Activations: 7}, always, info,
			"Worker status: Stopped=1 Idle=2 Busy=3 Killed=4 Queued=5 Msgs=6 Activations=7"},
		{pool.Event{Kind: pool.EvStderr, Worker: 0, Line: "first"}, always, info, "Worker 0 stderr: first"},
		{pool.Event{Kind: pool.EvAutoscale, Worker: -1, Scale: pool.ScaleEnabled}, always, info,
			"Autoscaling enabled: interval=15s scale_out=80% scale_in=30%"},
		{pool.Event{Kind: pool.EvAutoscale, Worker: 1, Scale: pool.ScaledOut, Running: 2, EMA: 0.8242, Queued: 1}, always, info,
			"Autoscale: scaled out to 2 workers (ema_busy=0.82 queued=1)"},
		{pool.Event{Kind: pool.EvAutoscale, Worker: 1, Scale: pool.ScaledIn, Running: 2, EMA: 0.2575}, always, info,
			"Autoscale: scaled in to 2 workers (ema_busy=0.26)"},
		{pool.Event{Kind: pool.EvStderr, Worker: 0, QID: "4Xy1", Line: "oops"}, always, info, "4Xy1: Worker 0 stderr: oops"},
	} {
		msg, level, ok := mux.FormatPoolEvent(tc.ev, true)
		if !ok || msg != tc.want || level != tc.level {
			t.Errorf("kind %d with -l: %q %v %v, want %q %v", tc.ev.Kind, msg, level, ok, tc.want, tc.level)
		}
		msg, _, ok = mux.FormatPoolEvent(tc.ev, false)
		if ok != tc.always || ok && msg != tc.want {
			t.Errorf("kind %d without -l: %q logged=%v, want logged=%v", tc.ev.Kind, msg, ok, tc.always)
		}
	}
}

// A worker that died: the advice depends on -l.
func TestFormatPoolEventDied(t *testing.T) {
	ev := pool.Event{Kind: pool.EvWorkerDied, Worker: 1}
	if msg, _, _ := mux.FormatPoolEvent(ev, true); msg != "Worker 1 died prematurely -- check your filter rules" {
		t.Errorf("with -l: %q", msg)
	}
	want := "Worker 1 died prematurely -- check your filter rules and use the '-l' flag on mimedefang-multiplexor to see Perl error messages"
	if msg, _, _ := mux.FormatPoolEvent(ev, false); msg != want {
		t.Errorf("without -l: %q", msg)
	}
	if _, _, ok := mux.FormatPoolEvent(pool.Event{Kind: pool.EventKind(999)}, true); ok {
		t.Error("an unknown kind was formatted")
	}
}

// PoolLog.Event writes the line at its level through the Logger.
func TestPoolLogWrites(t *testing.T) {
	var b bytes.Buffer
	l := mux.PoolLog{Logger: slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	l.Event(pool.Event{Kind: pool.EvQueueFull, Worker: -1}) // -l only: dropped
	l.Event(pool.Event{Kind: pool.EvNoFreeWorkers, Worker: -1, Map: true})
	if got := b.String(); strings.Count(got, "\n") != 1 || !strings.Contains(got, `level=WARN msg="map command failed: No free workers"`) {
		t.Errorf("logged %q", got)
	}
}
