package pool

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// StatsEvent is one line of the stats file (docs/protocols/mimedefang-multiplexor.md, "Stats file"), before formatting.
type StatsEvent struct {
	Time   time.Time
	Event  string // StartWorker, KillWorker, ReapWorker, StartFilter, EndFilter
	Worker int
	// Running and Busy are the running (idle, busy or killed) and busy
	// worker counts after the event.
	Running, Busy int
	// Extra is the event's own fields, without a leading space ("" for
	// none), e.g. `reason="Bringing workers up to minWorkers (2)"`.
	Extra string
}

// stat reports a stats event for slot s.
func (p *Pool) stat(s *slot, event, extra string) {
	if p.cfg.Stats == nil {
		return
	}
	p.cfg.Stats(StatsEvent{Time: p.clk.Now(), Event: event, Worker: s.n, Running: p.running(), Busy: p.busy(), Extra: extra})
}

// notify sends one notification (docs/protocols/mimedefang-multiplexor.md, "Notifications").
func (p *Pool) notify(msg string) {
	if p.cfg.Notify != nil {
		p.cfg.Notify(msg)
	}
}

// vlog logs a message the reference logs only with -l.
func (p *Pool) vlog(level slog.Level, format string, args ...any) {
	if p.cfg.Verbose {
		p.log.Log(context.Background(), level, fmt.Sprintf(format, args...))
	}
}

// alog logs a message the reference always logs.
func (p *Pool) alog(level slog.Level, format string, args ...any) {
	p.log.Log(context.Background(), level, fmt.Sprintf(format, args...))
}

// elog writes an event-loop debug line (-d).
func (p *Pool) elog(format string, args ...any) {
	if p.cfg.EventLog != nil {
		p.cfg.EventLog.Debug(fmt.Sprintf(format, args...))
	}
}

// statusLog is -L: the worker counts, every StatusLogInterval.
func (p *Pool) statusLog() {
	p.alog(slog.LevelInfo, "Worker status: Stopped=%d Idle=%d Busy=%d Killed=%d Queued=%d Msgs=%d Activations=%d",
		p.count(Stopped), p.count(Idle), p.count(Busy), p.count(Killed), len(p.queue), p.msgs, p.activations)
	p.after(p.cfg.StatusLogInterval, p.statusLog)
}
