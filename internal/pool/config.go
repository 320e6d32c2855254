package pool

import (
	"fmt"
	"log/slog"
	"sluice/internal/clock"
	"strings"
	"time"
)

// Config is a pool's fixed configuration. The pool applies no
// mimedefang-multiplexor clamps (those belong to the command line); it
// only makes MaxWorkers at least 1 and MinWorkers lie in [1, MaxWorkers].
type Config struct {
	// Program is the worker executable (an absolute path); Args follow
	// argv[0], which is the program's basename.
	Program string
	Args    []string
	// Dir is the workers' working directory ("" = the daemon's); Env their
	// environment (nil = the daemon's).
	Dir string
	Env []string

	MinWorkers  int           // -m
	MaxWorkers  int           // -x
	MaxRequests int           // -r: requests before a worker is recycled (<1: 1)
	MaxLifetime time.Duration // -V: from a worker's first request; <= 0 unlimited
	IdleTime    time.Duration // -i: idle timeout and idle-timer period
	BusyTimeout time.Duration // -b
	CmdTimeout  time.Duration // -c: writing a command to a worker
	SlewTime    time.Duration // -w: between bring-up activations
	// ActivationSpacing is -W: no process starts within this long of the
	// previous start (0: no spacing); whole seconds are counted in whole
	// seconds of the clock, as the reference does.
	ActivationSpacing time.Duration
	QueueSize         int           // -q: 0 = no queue
	QueueTimeout      time.Duration // -Q
	// DomainLimit is -y: busy recipok workers per recipient domain; it
	// applies only when 0 < DomainLimit < MaxWorkers.
	DomainLimit int
	// KillGrace is the wait before each kill escalation step (the
	// reference's fixed 10 s; 0 means 10 s).
	KillGrace time.Duration
	// LogStderr (-l) makes each line a worker writes on stderr an
	// EvStderr event; otherwise stderr is read and discarded.
	LogStderr bool

	// Embed is -E: the workers are forked from one Perl process that has
	// compiled Program (mimedefang.pl, with its filter) once (embed.go);
	// if it cannot start, workers are started as without Embed.
	Embed bool

	// StatusPipe is -Z: each worker gets the write end of a pipe as fd 3
	// and the tags it writes there while busy become its status tag (docs/protocols/mimedefang-multiplexor.md, "Status tags").
	// The caller passes the matching "-serveru" argument in Args.
	StatusPipe bool
	// TickInterval is -X: every TickInterval each of TickBands bands
	// sends "tick <band>" to a free worker (docs/protocols/mimedefang-multiplexor.md, "Ticks"); 0 disables ticks.
	TickInterval time.Duration
	TickBands    int // -P, clamped to [1, 30]
	// StatusLogInterval is -L: the "Worker status: ..." line is logged
	// at Info this often; 0 disables it.
	StatusLogInterval time.Duration
	// LogScheduling is -A: every choice of a worker is an EvScheduling
	// event (otherwise none is made: it would cost on every request).
	LogScheduling bool
	// RLimitRSS and RLimitAS are -R and -M in bytes (0: no limit): a
	// worker runs with RLIMIT_RSS, and RLIMIT_AS and RLIMIT_DATA, set to
	// them (soft and hard), through the exec shim of shim.go.
	RLimitRSS, RLimitAS uint64
	// Autoscale is -k (3.7.1, docs/protocols/mimedefang-multiplexor.md, "Autoscaling"): every 15 s an average of the
	// busy share of running workers starts or stops one worker.
	Autoscale bool

	// Notify receives each notification of docs/protocols/mimedefang-multiplexor.md, "Notifications" (without its newline) on
	// the owner goroutine; it must not block. nil: none.
	Notify func(msg string)
	// Stats receives each stats-file event of docs/protocols/mimedefang-multiplexor.md, "Stats file" on the owner
	// goroutine; it must not block. nil: none.
	Stats func(StatsEvent)
	// Events receives what the pool reports for its log (Event; package
	// mux writes the reference's syslog lines from them). It is called on
	// the owner goroutine, except for EvStderr events, which come from the
	// worker's stderr reader: it must be safe for concurrent use and must
	// not block. nil: none.
	Events func(Event)
	// EventLog, when set, gets a debug line for each event the owner
	// loop handles (-d).
	EventLog *slog.Logger

	Clock clock.Clock // nil: the real clock
}

// Request is one command for a worker.
type Request struct {
	// Line is the command without its newline; it is sent as received.
	Line string
	// Queue lets the request wait in the FIFO queue when no worker is free
	// (main-socket requests); map requests never queue.
	Queue bool
	// Map marks a socket-map lookup (docs/protocols/mimedefang-multiplexor.md, "Socket map"): a worker that dies or times out
	// on it is killed with "Busy timeout" and the lookup is not counted.
	Map bool
}

// Result is how a request ended: a worker's reply, or one of the Err*
// errors of this package.
type Result struct {
	// Reply is the worker's reply line, newline included when the worker
	// sent one (a partial line at EOF, or a line cut at 4096 bytes, has none).
	Reply []byte
	Err   error
	// BusyWorkers is the number of busy workers when ErrBusyTimeout struck.
	BusyWorkers int
}

// New checks cfg and returns a pool; no process starts before Run.
func New(cfg Config) (*Pool, error) {
	if !strings.HasPrefix(cfg.Program, "/") {
		return nil, fmt.Errorf("pool: worker program %q is not an absolute path", cfg.Program)
	}
	if cfg.MaxWorkers < 1 {
		cfg.MaxWorkers = 1
	}
	cfg.MinWorkers = min(max(cfg.MinWorkers, 1), cfg.MaxWorkers)
	cfg.MaxRequests = max(cfg.MaxRequests, 1)
	if cfg.DomainLimit < 0 || cfg.DomainLimit >= cfg.MaxWorkers {
		cfg.DomainLimit = 0
	}
	if cfg.QueueSize < 0 {
		cfg.QueueSize = 0
	}
	if cfg.KillGrace <= 0 {
		cfg.KillGrace = 10 * time.Second
	}
	cfg.TickBands = min(max(cfg.TickBands, 1), 30)
	if cfg.TickInterval < 0 {
		cfg.TickInterval = 0
	}
	for _, d := range []*time.Duration{&cfg.IdleTime, &cfg.BusyTimeout, &cfg.CmdTimeout, &cfg.SlewTime, &cfg.QueueTimeout} {
		if *d <= 0 {
			return nil, fmt.Errorf("pool: every timeout must be positive")
		}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	p := &Pool{
		cfg:     cfg,
		clk:     cfg.Clock,
		in:      make(chan ownerMsg, inBuffer),
		tags:    make(chan tagEvent),
		done:    make(chan struct{}),
		histo:   make([]int, cfg.MaxWorkers),
		oldFree: -1,
	}
	for i := range cfg.MaxWorkers {
		s := &slot{n: i}
		s.timers.busyEntry = timerEntry{index: -1, fn: func() { p.busyTimeout(s, s.timers.busyProc) }}
		p.slots = append(p.slots, s)
		p.stopped = append(p.stopped, i)
		p.inState[Stopped]++
	}
	for k := range p.hist {
		p.hist[k] = newHistory()
	}
	return p, nil
}
