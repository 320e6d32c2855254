package pool

import (
	"fmt"
	"syscall"
	"time"
)

// Event is one thing the pool reports for its log: the reference logs
// each as a syslog line, which package mux writes from it. Kind says
// which; the fields each kind sets are listed with it, the others are
// zero. Worker is the slot (-1 when none) for every kind.
type Event struct {
	Kind   EventKind
	Worker int
	PID    int
	// State: EvKillWorker, the state the worker was killed in;
	// EvScheduling, the chosen slot's.
	State State
	// Reason: EvStartWorker and EvKillWorker, why.
	Reason string
	// Err: EvStartFailed, EvWaitFailed, EvTalkError.
	Err error
	// Running: EvStartWorker, the running workers, this one included.
	Running int
	// Requests and Scans: EvKillWorker and EvResourceUsage, the
	// worker's counts.
	Requests, Scans int
	// Age and ReqAge: EvKillWorker, whole seconds since the worker started
	// and since its first request (-1: none yet).
	Age, ReqAge int64
	// Signal: EvKillEscalate, SIGTERM or SIGKILL.
	Signal syscall.Signal
	// Wait and Killed: EvReaped, how the worker ended and whether it was
	// told to (every worker is at shutdown).
	Wait   syscall.WaitStatus
	Killed bool
	// Usage: EvResourceUsage, the worker's rusage.
	Usage *syscall.Rusage
	// Map: EvNoFreeWorkers, the request was a socket-map lookup.
	Map bool
	// Queued: EvQueued and EvStatus, the requests queued.
	Queued int
	// Limit and Domain: EvDomainLimit, the -y cap and the domain at it.
	Limit  int
	Domain string
	// Cmd, Activation and Last: EvScheduling, the request's kind, the
	// chosen worker's activation number (0 for a stopped slot) and its
	// last command's kind.
	Cmd        Kind
	Activation uint64
	Last       Kind
	// Band: EvTickSkipped, the tick band (Worker is the slot that could
	// not be started, or -1 when no worker was free).
	Band int
	// OOM: EvWorkerDied, the worker wrote "Out of memory!" on stderr.
	OOM bool
	// Counts, Msgs and Activations: EvStatus, the slots in each State,
	// the scans and the activations since the start.
	Counts      [4]int
	Msgs        int
	Activations uint64
	// QID and Line: EvStderr, the worker's last queue id ("" for none)
	// and one line it wrote on stderr.
	QID, Line string
	// Config: EvStarted, the pool's configuration.
	Config *Config
	// Scale and EMA: EvAutoscale, what happened and the moving average
	// of the busy share then (Running and Queued are the running workers
	// and the queued requests after it).
	Scale Scale
	EMA   float64
}

// Scale is what an EvAutoscale event reports.
type Scale int

// The EvAutoscale events: autoscaling began (at the start, with -k), a
// worker was started (any activation with -k counts as a scale-out, as
// in 3.7.1), an idle worker was stopped by the autoscale check.
const (
	ScaleEnabled Scale = iota
	ScaledOut
	ScaledIn
)

// EventKind says which event an Event is.
type EventKind int

// The events, with the fields (besides Kind and Worker) each sets.
const (
	EvStarted           EventKind = iota // Run began: Config
	EvStartWorker                        // a worker started: PID, Running, Reason
	EvActivationSpacing                  // a worker was not started for -W
	EvStartFailed                        // a worker could not be started: Err
	EvKillWorker                         // a worker is told to exit: PID, State, Requests, Age, ReqAge, Reason
	EvKillEscalate                       // a killed worker is signalled again: PID, Signal
	EvWaitFailed                         // wait4 failed: PID, Err
	EvReaped                             // a worker was reaped: PID, Wait, Killed
	EvResourceUsage                      // a reaped worker's usage: Requests, Scans, Usage
	EvNoFreeWorkers                      // a request found no worker: Map
	EvQueued                             // a request was queued: Queued
	EvQueueFull                          // a request could not be queued
	EvDomainLimit                        // a recipok hit the -y cap: Limit, Domain
	EvScheduling                         // -A: a worker was chosen: State, Cmd, Activation, Last
	EvTickSkipped                        // a tick was not sent: Band
	EvActivateFailed                     // a chosen stopped slot could not start for a request
	EvTalkError                          // writing a command to a worker failed: Err
	EvWorkerDied                         // a worker closed its stdout without a reply: OOM
	EvStatus                             // -L: Counts, Queued, Msgs, Activations
	EvStderr                             // with LogStderr, a worker's stderr line: QID, Line
	EvEmbedFailed                        // -E: the embedded Perl process could not start: Err (workers are started as without -E)
	EvAutoscale                          // -k: Scale is what happened (ScaleEnabled, ScaledOut, ScaledIn); Running, EMA, Queued
)

// StatsEvent is one line of the stats file (docs/protocols/mimedefang-multiplexor.md, "Stats file"), before formatting.
type StatsEvent struct {
	Time   time.Time // when it happened
	Event  string    // StartWorker, KillWorker, ReapWorker, StartFilter, EndFilter
	Worker int       // the slot
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

// emit hands ev to Config.Events (nil: the event is dropped).
func (p *Pool) emit(ev Event) {
	if p.cfg.Events != nil {
		p.cfg.Events(ev)
	}
}

// elog writes an event-loop debug line (-d).
func (p *Pool) elog(format string, args ...any) {
	if p.cfg.EventLog != nil {
		p.cfg.EventLog.Debug(fmt.Sprintf(format, args...))
	}
}

// statusLog is -L: the worker counts, every StatusLogInterval.
func (p *Pool) statusLog() {
	ev := Event{Kind: EvStatus, Worker: -1, Queued: len(p.queue), Msgs: p.msgs, Activations: p.activations}
	for st := range ev.Counts {
		ev.Counts[st] = p.count(State(st))
	}
	p.emit(ev)
	p.after(p.cfg.StatusLogInterval, p.statusLog)
}
