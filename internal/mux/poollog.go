package mux

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"time"

	"sluice/internal/pool"
)

// PoolLog writes the pool's events (pool.Config.Events) as
// mimedefang-multiplexor's syslog lines, word for word, at the levels the
// reference uses (docs/protocols/mimedefang-multiplexor.md, "Logging").
type PoolLog struct {
	Logger *slog.Logger // nil: slog.Default()
	// Verbose is -l: the lines the reference writes only with -l (worker
	// starts, kills, reaps, queueing...) are written too. Without it only
	// what the reference always logs is (errors, -L status lines, -A
	// decisions, the workers' stderr when the pool reports it).
	Verbose bool
}

// Event writes ev's line, if the reference writes one; it is safe for
// concurrent use (pool.Config.Events).
func (l PoolLog) Event(ev pool.Event) {
	msg, level, ok := FormatPoolEvent(ev, l.Verbose)
	if !ok {
		return
	}
	log := l.Logger
	if log == nil {
		log = slog.Default()
	}
	log.Log(context.Background(), level, msg)
}

// verboseOnly are the events the reference logs only with -l.
var verboseOnly = [...]bool{
	pool.EvStarted: true, pool.EvStartWorker: true, pool.EvActivationSpacing: true,
	pool.EvKillWorker: true, pool.EvKillEscalate: true, pool.EvReaped: true,
	pool.EvResourceUsage: true, pool.EvQueued: true, pool.EvQueueFull: true,
	pool.EvDomainLimit: true, pool.EvTickSkipped: true, pool.EvActivateFailed: true,
	pool.EvTalkError: true,
}

// FormatPoolEvent is the reference's log line for ev and its level; ok is
// false when the reference writes none (a -l line without verbose).
func FormatPoolEvent(ev pool.Event, verbose bool) (msg string, level slog.Level, ok bool) {
	if int(ev.Kind) < len(verboseOnly) && verboseOnly[ev.Kind] && !verbose {
		return "", 0, false
	}
	switch ev.Kind {
	case pool.EvNoFreeWorkers:
		if ev.Map {
			return "map command failed: No free workers", slog.LevelWarn, true
		}
		return "No free workers", slog.LevelWarn, verbose
	case pool.EvReaped:
		return reapedText(ev), reapedLevel(ev), true
	case pool.EvWorkerDied:
		return diedText(ev, verbose), slog.LevelError, true
	}
	msg, level = poolEventText(ev)
	return msg, level, msg != ""
}

// poolEventText is the line of every event whose text does not depend on
// -l ("" for an unknown kind).
func poolEventText(ev pool.Event) (string, slog.Level) {
	info, warn, errl := slog.LevelInfo, slog.LevelWarn, slog.LevelError
	n := ev.Worker
	switch ev.Kind {
	case pool.EvStarted:
		c := ev.Config
		s := func(d time.Duration) int { return int(d / time.Second) }
		return fmt.Sprintf("started; minWorkers=%d, maxWorkers=%d, maxRequests=%d, maxLifetime=%d, maxIdleTime=%d, busyTimeout=%d, clientTimeout=%d",
			c.MinWorkers, c.MaxWorkers, c.MaxRequests, s(c.MaxLifetime), s(c.IdleTime), s(c.BusyTimeout), s(c.CmdTimeout)), info
	case pool.EvStartWorker:
		return fmt.Sprintf("Starting worker %d (pid %d) (%d running): %s", n, ev.PID, ev.Running, ev.Reason), info
	case pool.EvActivationSpacing:
		return fmt.Sprintf("Did not start worker %d: Not enough time elapsed since last worker activation", n), slog.LevelDebug
	case pool.EvEmbedFailed:
		return fmt.Sprintf("Could not initialize embedded Perl interpreter -- falling back to old method. (%v)", ev.Err), errl
	case pool.EvStartFailed:
		return fmt.Sprintf("Could not start worker %d: %v", n, ev.Err), errl
	case pool.EvKillWorker:
		return fmt.Sprintf("Killing %s worker %d (pid %d) req=%d age=%d req_age=%d: %s",
			strings.ToLower(ev.State.String()), n, ev.PID, ev.Requests, ev.Age, ev.ReqAge, ev.Reason), info
	case pool.EvKillEscalate:
		if ev.Signal == syscall.SIGKILL {
			return fmt.Sprintf("Worker %d (pid %d) taking way too long to exit; sending SIGKILL", n, ev.PID), info
		}
		return fmt.Sprintf("Worker %d (pid %d) taking too long to exit; sending SIGTERM", n, ev.PID), info
	case pool.EvWaitFailed:
		return fmt.Sprintf("wait4(%d): %v", ev.PID, ev.Err), errl
	case pool.EvResourceUsage:
		ru := ev.Usage
		return fmt.Sprintf("Worker %d resource usage: req=%d, scans=%d, user=%d.%03d, sys=%d.%03d, nswap=%d, majflt=%d, minflt=%d, maxrss=%d, bi=%d, bo=%d",
			n, ev.Requests, ev.Scans, ru.Utime.Sec, ru.Utime.Usec/1000, ru.Stime.Sec, ru.Stime.Usec/1000,
			ru.Nswap, ru.Majflt, ru.Minflt, ru.Maxrss, ru.Inblock, ru.Oublock), info
	case pool.EvQueued:
		return fmt.Sprintf("All workers are busy: Queueing request (%d queued)", ev.Queued), info
	case pool.EvQueueFull:
		return "Cannot queue request: request queue is full", info
	case pool.EvDomainLimit:
		return fmt.Sprintf("Hit per-domain recipok limit (%d) for domain %s", ev.Limit, ev.Domain), warn
	case pool.EvScheduling:
		return fmt.Sprintf("Scheduling %s worker %d for cmdno %d (activated=%d, last=%d)",
			ev.State, n, int(ev.Cmd)-1, ev.Activation, lastCmdNo(ev.Last)), info
	case pool.EvTickSkipped:
		if n < 0 {
			return fmt.Sprintf("Tick %d skipped -- no free workers", ev.Band), warn
		}
		return fmt.Sprintf("Tick %d skipped -- unable to activate worker %d", ev.Band, n), warn
	case pool.EvActivateFailed:
		return fmt.Sprintf("Unable to activate worker %d", n), errl
	case pool.EvTalkError:
		return fmt.Sprintf("handleWorkerReceivedCommand(%d): Timeout or error: %v", n, ev.Err), errl
	case pool.EvStatus:
		c := ev.Counts
		return fmt.Sprintf("Worker status: Stopped=%d Idle=%d Busy=%d Killed=%d Queued=%d Msgs=%d Activations=%d",
			c[pool.Stopped], c[pool.Idle], c[pool.Busy], c[pool.Killed], ev.Queued, ev.Msgs, ev.Activations), info
	case pool.EvAutoscale:
		return autoscaleText(ev), info
	case pool.EvStderr:
		prefix := ""
		if ev.QID != "" {
			prefix = ev.QID + ": "
		}
		return fmt.Sprintf("%sWorker %d stderr: %s", prefix, n, ev.Line), info
	}
	return "", info
}

// reapedText is the reference's logWorkerReaped; a worker that was not
// told to exit is flagged.
func reapedText(ev pool.Event) string {
	extra := ""
	if !ev.Killed {
		extra = " (WORKER DIED UNEXPECTEDLY)"
	}
	ws := ev.Wait
	switch {
	case ws.Exited():
		return fmt.Sprintf("Reap: worker %d (pid %d) exited normally with status %d%s", ev.Worker, ev.PID, ws.ExitStatus(), extra)
	case ws.Signaled() && ev.Killed && (ws.Signal() == syscall.SIGTERM || ws.Signal() == syscall.SIGKILL):
		return fmt.Sprintf("Reap: worker %d (pid %d) exited due to SIGTERM/SIGKILL as expected.", ev.Worker, ev.PID)
	case ws.Signaled():
		return fmt.Sprintf("Reap: worker %d (pid %d) exited due to signal %d%s", ev.Worker, ev.PID, ws.Signal(), extra)
	}
	return fmt.Sprintf("Reap: worker %d (pid %d) exited for unknown reason%s", ev.Worker, ev.PID, extra)
}

// reapedLevel: an expected exit is debug, an unexpected one an error.
func reapedLevel(ev pool.Event) slog.Level {
	if ev.Killed {
		return slog.LevelDebug
	}
	return slog.LevelError
}

// diedText is the reference's error for a worker that closed its stdout
// without answering; it is logged even without -l, and its advice
// depends on -l.
func diedText(ev pool.Event, verbose bool) string {
	switch {
	case ev.OOM:
		return fmt.Sprintf("Worker %d ran out of memory -- possible DoS attack due to complex MIME?", ev.Worker)
	case verbose:
		return fmt.Sprintf("Worker %d died prematurely -- check your filter rules", ev.Worker)
	}
	return fmt.Sprintf("Worker %d died prematurely -- check your filter rules and use the '-l' flag on mimedefang-multiplexor to see Perl error messages", ev.Worker)
}

// autoscaleText is 3.7.1's line for an autoscaling event (-k; logged
// with or without -l).
func autoscaleText(ev pool.Event) string {
	switch ev.Scale {
	case pool.ScaledOut:
		return fmt.Sprintf("Autoscale: scaled out to %d workers (ema_busy=%.2f queued=%d)", ev.Running, ev.EMA, ev.Queued)
	case pool.ScaledIn:
		return fmt.Sprintf("Autoscale: scaled in to %d workers (ema_busy=%.2f)", ev.Running, ev.EMA)
	}
	return fmt.Sprintf("Autoscaling enabled: interval=%ds scale_out=%.0f%% scale_in=%.0f%%",
		int(pool.AutoscaleInterval/time.Second), pool.AutoscaleOut*100, pool.AutoscaleIn*100)
}

// lastCmdNo is the reference's number for a slot's last command: -2 for
// none, 0-3 for scan, relayok, senderok, recipok.
func lastCmdNo(k pool.Kind) int {
	if k == pool.Other {
		return -2
	}
	return int(k) - 1
}
