// Package pool runs a pool of filter worker processes the way
// mimedefang-multiplexor does: a fixed array of slots (Stopped, Idle, Busy,
// Killed), one line-protocol command per busy worker over its stdin and
// stdout, a FIFO queue, busy and idle timeouts, recycling and reaping.
//
// One owner goroutine holds every slot, the queue and the timers; clients
// talk to it over channels. Timers come from an injected clock.Clock.
// Children are reaped with wait4(WNOHANG) on SIGCHLD.
//
// A request's worker I/O is done by the client's own goroutine: the owner
// grants it a Busy worker (and keeps the slot, its busy timer and all
// bookkeeping), the client writes the command and reads the reply on the
// worker's pipes, then claims the call with an atomic state change and
// reports the outcome to the owner in one message, before it returns. The
// owner can still end the call first (busy timeout, kill, shutdown): it
// claims the call, answers the client itself and interrupts the client's
// read; every such claim kills the worker. A client whose context ends
// hands its unfinished read to a helper goroutine. io.go has the whole
// protocol.
package pool

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"sluice/internal/clock"
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
	// LogStderr logs workers' stderr lines (-l); otherwise it is discarded.
	LogStderr bool
	// Verbose is -l: the reference's optional log messages (worker starts,
	// kills, reaps, queueing...) are logged. Without it only what the
	// reference always logs is (errors, -L status lines, -A decisions).
	Verbose bool

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
	// LogScheduling is -A: every choice of a worker is logged at Info.
	LogScheduling bool
	// RLimitRSS and RLimitAS are -R and -M in bytes (0: no limit): a
	// worker runs with RLIMIT_RSS, and RLIMIT_AS and RLIMIT_DATA, set to
	// them (soft and hard), through the exec shim of shim.go.
	RLimitRSS, RLimitAS uint64
	// Autoscale is -k (upstream HEAD, docs/protocols/mimedefang-multiplexor.md, "Autoscaling"): every 15 s an average of the
	// busy share of running workers starts or stops one worker.
	Autoscale bool

	// Notify receives each notification of docs/protocols/mimedefang-multiplexor.md, "Notifications" (without its newline) on
	// the owner goroutine; it must not block. nil: none.
	Notify func(msg string)
	// Stats receives each stats-file event of docs/protocols/mimedefang-multiplexor.md, "Stats file" on the owner
	// goroutine; it must not block. nil: none.
	Stats func(StatsEvent)
	// EventLog, when set, gets a debug line for each event the owner
	// loop handles (-d).
	EventLog *slog.Logger

	Clock  clock.Clock  // nil: the real clock
	Logger *slog.Logger // nil: slog.Default()
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

type call struct {
	req  Request
	kind Kind
	// ch signals the client: first its grant (proc set) if it gets one,
	// then its result (res) unless the grant's holder claimed the call.
	// Messages carry no data, so that making ch is one allocation.
	ch    chan struct{}
	res   Result
	timer *timerEntry // queue timeout while queued (qtimer)
	// qtimer is the queue timeout's timer entry, kept in the call so that
	// queueing allocates no entry.
	qtimer timerEntry
	start  time.Time // clock time of dispatch
	// tick is the band of an internal tick request (docs/protocols/mimedefang-multiplexor.md, "Ticks"), -1 otherwise.
	tick int
	// onDone, when set, is called on the owner goroutine instead of
	// sending the result on ch (ticks).
	onDone func(Result)

	// Set by the owner when it grants a worker (see io.go).
	slot int
	proc *process
	// io is the state of a granted call (ioRunning...), shared by the
	// owner and the grant's holder; ior is the holder's progress.
	io    atomic.Int32
	ior   ioProgress
	watch ctxWatch // the client's (clientIO)
}

// scanPath reports whether c takes the reference's scan path (doScan: the
// activation reason, StartFilter and EndFilter, the queue id and working
// directory): a scan with something after "scan ". A bare "scan " is
// counted as a scan but otherwise handled as any other command.
func (c *call) scanPath() bool { return c.kind == Scan && len(c.req.Line) > len("scan ") }

type slot struct {
	n            int
	state        State
	proc         *process
	numRequests  int
	numScans     int
	activated    time.Time
	firstReq     time.Time
	idleSince    time.Time
	lastChange   time.Time
	activationNo uint64
	generation   int
	tag          string
	cur, last    Kind
	domain       string
	call         *call
	busyTimer    *timerEntry
	// busyT is the entry busyTimer points to while set, and busyProc the
	// process it was set for (no allocation per request).
	busyT       timerEntry
	busyProc    *process
	killTimer   *timerEntry
	deadTimer   *timerEntry
	dead        bool // stdout ended: never chosen again
	reapPending bool // reaped while busy: finish once the I/O reports
	// idleSeq orders idle slots as the reference's idle list does (the
	// most recently idle first), which its worker choice depends on.
	idleSeq uint64
	// workdir is the scan directory of the last scan (cleared by other
	// client commands): EndFilter is logged only when it is set.
	workdir string
}

// Pool is a running worker pool. Create it with New and run it with Run.
type Pool struct {
	cfg Config
	clk clock.Clock
	log *slog.Logger
	// in carries calls, worker I/O results and functions to run to the
	// owner loop, in the order they were sent (so a client that reported
	// its worker's reply and then asks for a snapshot sees the worker
	// idle). It is buffered: a sender rarely waits, and the owner takes
	// what has come in a batch (Run). tags carries the status updates
	// read from -Z pipes.
	in   chan ownerMsg
	tags chan tagEvent
	done chan struct{} // closed when the owner loop has exited
	wg   sync.WaitGroup

	// Owned by the loop goroutine.
	slots          []*slot
	stopped        []int // Stopped slots, the next to start first
	queue          []*call
	timers         timerHeap
	generation     int
	activations    uint64
	msgs           int
	lastActivation time.Time
	bringUp        *timerEntry
	histo          []int
	hist           [nkinds]*history
	start          time.Time
	oldFree        int     // free slots after the last state change (-1: none yet)
	idleSeq        uint64  // source of slot.idleSeq
	idleBuf        []*slot // findFree's scratch
	// nowT is the clock's time for the message being handled (nowSet):
	// one reading of the clock serves all of its bookkeeping.
	nowT   time.Time
	nowSet bool

	ema         float64
	lastScaleIn time.Time

	// pollWaiters counts the clients waiting on the poller for a
	// worker's reply (PollWaiters).
	pollWaiters atomic.Int32

	// wmu guards groups, the watch groups of clients' contexts (io.go).
	wmu    sync.Mutex
	groups map[<-chan struct{}]*watchGroup
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
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	p := &Pool{
		cfg:     cfg,
		clk:     cfg.Clock,
		log:     cfg.Logger,
		in:      make(chan ownerMsg, inBuffer),
		tags:    make(chan tagEvent),
		done:    make(chan struct{}),
		histo:   make([]int, cfg.MaxWorkers),
		oldFree: -1,
	}
	for i := range cfg.MaxWorkers {
		s := &slot{n: i}
		s.busyT = timerEntry{index: -1, fn: func() { p.busyTimeout(s, s.busyProc) }}
		p.slots = append(p.slots, s)
		p.stopped = append(p.stopped, i)
	}
	for k := range p.hist {
		p.hist[k] = newHistory()
	}
	return p, nil
}

// Config returns the configuration in force (after New's adjustments).
func (p *Pool) Config() Config { return p.cfg }

// Do sends req to a worker, or queues it, and waits for the outcome. It
// returns ErrClosed when ctx ends or the pool stops first.
func (p *Pool) Do(ctx context.Context, req Request) Result {
	c := &call{req: req, kind: KindOf(req.Line), ch: make(chan struct{}, 2), tick: -1}
	select {
	case p.in <- ownerMsg{c: c}: // the usual case, cheaper than the select below
	default:
		select {
		case p.in <- ownerMsg{c: c}:
		case <-p.done:
			return Result{Err: ErrClosed}
		case <-ctx.Done():
			return Result{Err: ErrClosed}
		}
	}
	select {
	case <-c.ch:
	case <-p.done:
		return Result{Err: ErrClosed}
	case <-ctx.Done():
		// The call goes on without its client: a grant still needs
		// its I/O done.
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			select {
			case <-c.ch:
				if c.proc != nil {
					p.clientIO(context.Background(), c, c.proc)
				}
			case <-p.done:
			}
		}()
		return Result{Err: ErrClosed}
	}
	if c.proc == nil {
		return c.res
	}
	return p.clientIO(ctx, c, c.proc)
}

// PollWaiters is the number of clients waiting on the runtime's poller
// for a worker's reply. The poller is consulted only when no goroutine
// is runnable, so a caller that could go on with more work (mux's
// connection goroutines taking the next connection at once) should rather
// wait while it is not zero: replies that have come are then read, and
// their workers freed, without delay.
func (p *Pool) PollWaiters() int { return int(p.pollWaiters.Load()) }

// Reread starts a new generation, as the `reread` command and SIGINT do:
// idle workers are killed now, busy ones when they finish.
func (p *Pool) Reread() { p.exec(p.reread) }

// exec runs f on the owner goroutine and waits for it (a no-op once the
// pool has stopped).
func (p *Pool) exec(f func()) bool {
	fin := make(chan struct{})
	select {
	case p.in <- ownerMsg{f: func() { f(); close(fin) }}:
	case <-p.done:
		return false
	}
	select {
	case <-fin:
		return true
	case <-p.done:
		return false
	}
}

// Run starts the minimum workers and serves until ctx ends; then it
// closes every worker's stdin, waits up to KillGrace for them to exit,
// sends SIGTERM, waits again, sends SIGKILL, and reaps every child before
// it returns. Queued and in-flight requests get ErrClosed.
func (p *Pool) Run(ctx context.Context) error {
	sigchld := make(chan os.Signal, 1)
	signal.Notify(sigchld, syscall.SIGCHLD)
	defer signal.Stop(sigchld)
	defer func() {
		close(p.done)
		p.wg.Wait()
		p.stopWatches()
	}()
	p.start = p.clk.Now()
	for _, s := range p.slots {
		s.lastChange = p.start
	}
	p.vlog(slog.LevelInfo, "started; minWorkers=%d, maxWorkers=%d, maxRequests=%d, maxLifetime=%d, maxIdleTime=%d, busyTimeout=%d, clientTimeout=%d",
		p.cfg.MinWorkers, p.cfg.MaxWorkers, p.cfg.MaxRequests, int(p.cfg.MaxLifetime/time.Second),
		int(p.cfg.IdleTime/time.Second), int(p.cfg.BusyTimeout/time.Second), int(p.cfg.CmdTimeout/time.Second))
	p.bringUpCheck()
	p.after(p.cfg.IdleTime, p.idleTimer)
	if p.cfg.StatusLogInterval > 0 {
		p.after(p.cfg.StatusLogInterval, p.statusLog)
	}
	if p.cfg.Autoscale {
		p.after(autoscaleInterval, p.autoscaleTick)
	}
	for band := range p.cfg.TickBands {
		p.scheduleTick(band)
	}

	var timer clock.Timer
	var armed time.Time
	for {
		var tc <-chan time.Time
		if len(p.timers) > 0 {
			// A timer armed for a deadline that has since gone (a busy
			// timer cancelled) is left to fire early: fireTimers then
			// finds nothing due and the loop arms the next one. Re-arming
			// for every request would cost a timer each.
			when := p.timers[0].when
			if timer == nil || when.Before(armed) {
				if timer != nil {
					timer.Stop()
				}
				timer = p.clk.NewTimer(when.Sub(p.clk.Now()))
				armed = when
			}
			tc = timer.C()
		} else if timer != nil {
			timer.Stop()
			timer = nil
		}
		p.nowSet = false
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			p.shutdown(sigchld)
			return nil
		case m := <-p.in:
			p.handle(m)
			// Take what else has come without a full select (whose cost
			// grows with its cases); a bounded batch, so that timers,
			// signals and ctx are not starved.
		batch:
			for range inBatch {
				select {
				case m := <-p.in:
					p.handle(m)
				default:
					break batch
				}
			}
		case ev := <-p.tags:
			p.handleTag(ev)
		case <-sigchld:
			p.reap()
		case <-tc:
			timer = nil
			p.fireTimers()
		}
	}
}

// ownerMsg is one message on Pool.in: a call (c), a function to run (f)
// or a worker I/O event (ev).
type ownerMsg struct {
	c  *call
	f  func()
	ev ioEvent
}

const (
	inBuffer = 256 // capacity of Pool.in
	inBatch  = 32  // messages taken after one select, at most
)

func (p *Pool) handle(m ownerMsg) {
	p.nowSet = false
	switch {
	case m.c != nil:
		p.submit(m.c)
	case m.f != nil:
		m.f()
	default:
		p.handleIO(m.ev)
	}
}

// submit is docs/protocols/mimedefang-multiplexor.md, "Forwarded commands": cap per domain, choose a worker, queue or refuse.
func (p *Pool) submit(c *call) {
	if c.kind == RecipOK && p.cfg.DomainLimit > 0 {
		if d, ok := RecipokDomain(c.req.Line); ok {
			n := 0
			for _, s := range p.slots {
				if s.state == Busy && s.cur == RecipOK && strings.EqualFold(s.domain, d) {
					n++
				}
			}
			if n >= p.cfg.DomainLimit {
				p.vlog(slog.LevelWarn, "Hit per-domain recipok limit (%d) for domain %s", p.cfg.DomainLimit, d)
				c.finish(Result{Err: ErrDomainLimit})
				return
			}
		}
	}
	s := p.findFree(c.kind)
	if s == nil {
		if c.req.Queue && p.cfg.QueueSize > 0 {
			if len(p.queue) < p.cfg.QueueSize {
				p.queue = append(p.queue, c)
				c.qtimer = timerEntry{index: -1, c: c}
				c.timer = p.schedule(&c.qtimer, p.cfg.QueueTimeout)
				if p.cfg.Verbose {
					p.vlog(slog.LevelInfo, "All workers are busy: Queueing request (%d queued)", len(p.queue))
				}
				return
			}
			p.vlog(slog.LevelInfo, "Cannot queue request: request queue is full")
		}
		if c.req.Map {
			p.alog(slog.LevelWarn, "map command failed: No free workers")
		} else {
			p.vlog(slog.LevelWarn, "No free workers")
		}
		c.finish(Result{Err: ErrNoFreeWorkers})
		return
	}
	p.dispatch(s, c)
}

func (p *Pool) queueTimeout(c *call) {
	for i, q := range p.queue {
		if q == c {
			p.queue = append(p.queue[:i], p.queue[i+1:]...)
			c.finish(Result{Err: ErrQueueTimeout})
			return
		}
	}
}

// findFree is docs/protocols/mimedefang-multiplexor.md, "Choosing a worker", the reference's findFreeWorker: among the idle
// workers, taken in the order of its idle list (the most recently idle
// first), one whose last command kind is k or which has run nothing since
// it started, preferring a real match and then the oldest process; else
// the oldest idle worker; else the first stopped slot. With -A the choice
// is logged.
func (p *Pool) findFree(k Kind) *slot {
	idle := p.idleBuf[:0]
	for _, s := range p.slots {
		if s.state == Idle && !s.dead && !s.reapPending {
			idle = append(idle, s)
		}
	}
	p.idleBuf = idle[:0]
	slices.SortFunc(idle, func(a, b *slot) int { return cmp.Compare(b.idleSeq, a.idleSeq) })
	matches := func(s *slot) bool { return k != Other && s.last == k }
	var best, same *slot
	for _, s := range idle {
		if best == nil || s.activationNo < best.activationNo {
			best = s
		}
		if matches(s) || s.last == Other {
			if same == nil || !matches(same) || s.activationNo < same.activationNo {
				same = s
			}
		}
	}
	if same != nil {
		best = same
	}
	if best == nil && len(p.stopped) > 0 {
		best = p.slots[p.stopped[0]]
	}
	if best != nil && p.cfg.LogScheduling {
		act := uint64(0)
		if best.activationNo > 0 {
			act = best.activationNo - 1
		}
		p.alog(slog.LevelInfo, "Scheduling %s worker %d for cmdno %d (activated=%d, last=%d)",
			best.state, best.n, int(k)-1, act, lastCmdNo(best.last))
	}
	return best
}

// lastCmdNo is the reference's number for a slot's last command: -2 for
// none, 0-3 for scan, relayok, senderok, recipok.
func lastCmdNo(k Kind) int {
	if k == Other {
		return -2
	}
	return int(k) - 1
}

// activationReason is the log's reason for starting a worker for c.
func activationReason(c *call) string {
	switch {
	case c.tick >= 0:
		return "About to run tick"
	case c.req.Map:
		return "About to handle map request"
	case c.scanPath():
		return "About to perform scan"
	default:
		return "About to execute command '" + truncate(c.req.Line+"\n", 100) + "'"
	}
}

// dispatch starts s if needed and sends c's command to it.
func (p *Pool) dispatch(s *slot, c *call) {
	if s.state == Stopped {
		if err := p.activate(s, activationReason(c)); err != nil {
			switch {
			case c.tick >= 0:
				p.vlog(slog.LevelWarn, "Tick %d skipped -- unable to activate worker %d", c.tick, s.n)
			case c.req.Map:
				p.alog(slog.LevelWarn, "map command failed: No free workers")
			default:
				p.vlog(slog.LevelError, "Unable to activate worker %d", s.n)
			}
			c.finish(Result{Err: ErrActivate})
			return
		}
	}
	now := p.now()
	p.setState(s, Busy)
	s.cur = c.kind
	if c.kind != Other {
		s.last = c.kind
	}
	s.domain = ""
	if c.kind == RecipOK {
		s.domain, _ = RecipokDomain(c.req.Line)
	}
	s.call = c
	c.start = now
	proc := s.proc
	if c.tick >= 0 {
		s.tag = fmt.Sprintf("tick %d", c.tick)
	} else {
		s.tag = commandTag(c.req.Line)
		p.notifyTag(s)
		p.noteCommand(s, c)
	}
	if p.cfg.EventLog != nil {
		p.elog("dispatch worker=%d pid=%d cmd=%q", s.n, proc.pid, truncate(c.req.Line, 100))
	}
	s.busyProc = proc
	s.busyTimer = p.schedule(&s.busyT, p.cfg.BusyTimeout)
	c.slot = s.n
	// The stats line comes before the hand-off: once the worker has the
	// command its reply can reach the client, and the record must not
	// trail the answer it describes.
	if c.scanPath() && c.tick < 0 && !c.req.Map {
		p.stat(s, "StartFilter", "")
	}
	p.grant(c, proc)
}

// noteCommand records what the reference keeps about a client command for
// its logs: the queue id that prefixes the worker's stderr lines, and a
// scan's directory (EndFilter is logged only while it is set).
func (p *Pool) noteCommand(s *slot, c *call) {
	field := func(i, n int) (string, bool) {
		for f := range strings.FieldsSeq(c.req.Line) {
			if i == 0 {
				return truncate(f, n), true
			}
			i--
		}
		return "", false
	}
	if c.req.Map {
		s.workdir = ""
		return
	}
	qid := ""
	switch {
	case c.scanPath():
		q, ok := field(1, 31)
		if !ok {
			return // the reference's sscanf keeps both
		}
		qid = q
		if d, ok := field(2, 511); ok {
			s.workdir = d
		}
	case c.kind == SenderOK:
		s.workdir = ""
		qid, _ = field(6, 31)
	case c.kind == RecipOK:
		s.workdir = ""
		qid, _ = field(8, 31)
	default:
		s.workdir = ""
	}
	if *s.proc.qid.Load() != qid {
		q := qid // only a changed id is allocated
		s.proc.qid.Store(&q)
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// activate starts a process in the stopped slot s.
func (p *Pool) activate(s *slot, reason string) error {
	now := p.now()
	if !p.mayActivate() {
		p.vlog(slog.LevelDebug, "Did not start worker %d: Not enough time elapsed since last worker activation", s.n)
		return fmt.Errorf("pool: activation spacing")
	}
	proc, err := spawn(&p.cfg)
	p.nowSet = false // a fork takes a while
	if err != nil {
		p.alog(slog.LevelError, "Could not start worker %d: %v", s.n, err)
		return err
	}
	p.lastActivation = now
	p.activations++
	for i, n := range p.stopped {
		if n == s.n {
			p.stopped = append(p.stopped[:i], p.stopped[i+1:]...)
			break
		}
	}
	s.proc = proc
	s.numRequests, s.numScans = 0, 0
	s.activated, s.firstReq = now, time.Time{}
	s.activationNo = p.activations
	s.generation = p.generation
	s.last, s.cur = Other, Other
	s.dead, s.reapPending = false, false
	p.setState(s, Idle)
	s.idleSince = now
	p.hist[Scan].add(now, func(b *bucket) { b.activated++ })
	p.vlog(slog.LevelInfo, "Starting worker %d (pid %d) (%d running): %s", s.n, proc.pid, p.running(), reason)
	p.stat(s, "StartWorker", `reason="`+reason+`"`)
	n := 1
	if proc.status != nil {
		n++
	}
	p.wg.Add(n)
	go p.drainStderr(s.n, proc)
	if proc.status != nil {
		go p.readStatus(s.n, proc)
	}
	return nil
}

// setState is the reference's putOnList: the tag is always cleared; a
// real change is notified (docs/protocols/mimedefang-multiplexor.md, "Notifications": the StateChange line, then F when the free
// count changed, then Z or Y), timed, and counted in the busy histogram.
func (p *Pool) setState(s *slot, st State) {
	s.tag = ""
	if s.state == st {
		return
	}
	if p.cfg.Notify != nil {
		p.notify(fmt.Sprintf("S %d StateChange %s -> %s", s.n, s.state, st))
	}
	if p.cfg.EventLog != nil {
		p.elog("worker=%d %s -> %s", s.n, s.state, st)
	}
	s.state = st
	now := p.now()
	s.lastChange = now
	switch st {
	case Busy:
		p.histo[p.busy()-1]++
		if s.firstReq.IsZero() {
			s.firstReq = now
		}
	case Idle:
		p.idleSeq++
		s.idleSeq = p.idleSeq
	}
	free := p.count(Idle) + p.count(Stopped)
	if free != p.oldFree && p.cfg.Notify != nil {
		p.notify("F " + strconv.Itoa(free))
	}
	if free == 0 {
		p.notify("Z")
	}
	if p.oldFree == 0 && free != 0 {
		p.notify("Y")
	}
	p.oldFree = free
}

// handleIO is the end of a command on a worker (docs/protocols/mimedefang-multiplexor.md, "Forwarded commands" and "After each reply").
func (p *Pool) handleIO(ev ioEvent) {
	s := p.slots[ev.slot]
	if s.proc != ev.proc {
		return
	}
	if s.state != Busy || s.call == nil {
		// A killed worker's late answer.
		if s.reapPending {
			p.finishReap(s)
		}
		return
	}
	c := s.call
	s.call = nil
	s.busyTimer.cancel(p)
	s.busyTimer = nil
	if p.cfg.EventLog != nil {
		p.elog("reply worker=%d bytes=%d eof=%v writeErr=%v", s.n, len(ev.reply), ev.eof, ev.writeErr)
	}
	if ev.writeErr != nil {
		p.vlog(slog.LevelError, "handleWorkerReceivedCommand(%d): Timeout or error: %v", s.n, ev.writeErr)
		c.finish(Result{Err: ErrTalk})
		p.kill(s, "Error talking to worker process")
		if s.reapPending {
			p.finishReap(s)
		}
		return
	}
	noData := ev.eof && len(ev.reply) == 0
	if ev.eof {
		// Its stdout is gone: it is never chosen again, and if it does not
		// exit by itself it is killed.
		s.dead = true
	}
	if c.req.Map && noData {
		c.finish(Result{Err: ErrNoResponse})
		p.kill(s, "Busy timeout")
		if s.reapPending {
			p.finishReap(s)
		}
		return
	}
	var r Result
	if noData {
		if c.tick < 0 {
			p.logDied(s)
		}
		r.Err = ErrNoResponse
	} else {
		r.Reply = ev.reply
	}
	s.numRequests++
	p.finishCommand(s, c)
	c.finish(r)
	p.setState(s, Idle)
	s.idleSince = p.now()
	s.cur = Other
	p.checkExpiry(s)
	if c.tick < 0 && !c.req.Map && s.workdir != "" && p.cfg.Stats != nil {
		p.stat(s, "EndFilter", "numRequests="+strconv.Itoa(s.numRequests))
	}
	if s.reapPending {
		p.finishReap(s)
		return
	}
	if s.dead && s.state == Idle {
		proc := s.proc
		s.deadTimer = p.after(p.cfg.KillGrace, func() {
			if s.proc == proc && s.state == Idle {
				p.kill(s, "EventTcp_ReadBuf failed")
			}
		})
	}
}

// logDied is the reference's error for a worker that closed its stdout
// without answering; it is logged even without -l.
func (p *Pool) logDied(s *slot) {
	switch {
	case s.proc.oom.Load():
		p.alog(slog.LevelError, "Worker %d ran out of memory -- possible DoS attack due to complex MIME?", s.n)
	case p.cfg.Verbose:
		p.alog(slog.LevelError, "Worker %d died prematurely -- check your filter rules", s.n)
	default:
		p.alog(slog.LevelError, "Worker %d died prematurely -- check your filter rules and use the '-l' flag on mimedefang-multiplexor to see Perl error messages", s.n)
	}
}

// finishCommand counts a command that ended (answered, timed out or died).
func (p *Pool) finishCommand(s *slot, c *call) {
	now := p.now()
	if c.kind != Other {
		busy := p.busy()
		ms := now.Sub(c.start).Milliseconds()
		p.hist[c.kind].add(now, func(b *bucket) {
			b.count++
			b.busy += busy
			b.ms += ms
		})
	}
	if c.kind == Scan {
		s.numScans++
		p.msgs++
	}
}

// checkExpiry is docs/protocols/mimedefang-multiplexor.md, "After each reply": serve the queue (unless this worker is far past its
// request limit), else recycle on request count, lifetime or generation.
func (p *Pool) checkExpiry(s *slot) {
	if len(p.queue) > 0 && s.numRequests < 3*p.cfg.MaxRequests {
		c := p.popQueue()
		if t := p.findFree(c.kind); t != nil {
			p.dispatch(t, c)
		} else {
			p.vlog(slog.LevelWarn, "No free workers")
			c.finish(Result{Err: ErrNoFreeWorkers})
		}
		return
	}
	now := p.now()
	switch {
	case s.numRequests >= p.cfg.MaxRequests:
		p.kill(s, fmt.Sprintf("Worker has processed %d requests", s.numRequests))
	case p.cfg.MaxLifetime > 0 && !s.firstReq.IsZero() && now.Sub(s.firstReq) > p.cfg.MaxLifetime:
		p.kill(s, fmt.Sprintf("Worker has exceeded maximum lifetime of %d seconds", int(p.cfg.MaxLifetime/time.Second)))
	case s.generation < p.generation:
		p.kill(s, "New generation -- forcing reread of filter rules")
	}
}

// busyTimeout is docs/protocols/mimedefang-multiplexor.md, "Busy timeout".
func (p *Pool) busyTimeout(s *slot, proc *process) {
	s.busyTimer = nil
	if s.proc != proc || s.state != Busy || s.call == nil {
		return
	}
	c := s.call
	s.call = nil
	p.elog("busy timeout worker=%d", s.n)
	if c.req.Map {
		c.finish(Result{Err: ErrBusyTimeout})
		p.kill(s, "Busy timeout")
		return
	}
	busy := p.busy()
	s.numRequests++
	p.finishCommand(s, c)
	c.finish(Result{Err: ErrBusyTimeout, BusyWorkers: busy})
	if c.tick < 0 {
		p.notify("B")
	}
	p.kill(s, "Busy timeout")
	if c.tick < 0 && s.workdir != "" && p.cfg.Stats != nil {
		p.stat(s, "EndFilter", "numRequests="+strconv.Itoa(s.numRequests))
	}
}

// kill is docs/protocols/mimedefang-multiplexor.md, "Killing and reaping": SIGCONT (and SIGTERM at once if busy), close stdin, then
// escalate every KillGrace until the process is reaped.
func (p *Pool) kill(s *slot, reason string) {
	proc := s.proc
	if proc == nil || s.state == Killed {
		return
	}
	wasBusy := s.state == Busy
	now := p.clk.Now()
	age := secs(now, s.activated)
	p.vlog(slog.LevelInfo, "Killing %s worker %d (pid %d) req=%d age=%d req_age=%d: %s",
		strings.ToLower(s.state.String()), s.n, proc.pid, s.numRequests, age, secs(now, s.firstReq), reason)
	signalProc(proc, syscall.SIGCONT)
	if wasBusy {
		signalProc(proc, syscall.SIGTERM)
	}
	if s.call != nil {
		c := s.call
		s.call = nil
		c.finish(Result{Err: ErrClosed})
	}
	s.busyTimer.cancel(p)
	s.busyTimer = nil
	s.deadTimer.cancel(p)
	s.deadTimer = nil
	p.setState(s, Killed)
	closeStdin(proc)
	s.killTimer = p.after(p.cfg.KillGrace, func() {
		if s.proc != proc || proc.reaped {
			return
		}
		signalProc(proc, syscall.SIGCONT)
		if wasBusy {
			p.vlog(slog.LevelInfo, "Worker %d (pid %d) taking way too long to exit; sending SIGKILL", s.n, proc.pid)
			signalProc(proc, syscall.SIGKILL)
			return
		}
		p.vlog(slog.LevelInfo, "Worker %d (pid %d) taking too long to exit; sending SIGTERM", s.n, proc.pid)
		signalProc(proc, syscall.SIGTERM)
		s.killTimer = p.after(p.cfg.KillGrace, func() {
			if s.proc == proc && !proc.reaped {
				p.vlog(slog.LevelInfo, "Worker %d (pid %d) taking way too long to exit; sending SIGKILL", s.n, proc.pid)
				signalProc(proc, syscall.SIGCONT)
				signalProc(proc, syscall.SIGKILL)
			}
		})
	})
	p.stat(s, "KillWorker", fmt.Sprintf(`req=%d age=%d reason="%s"`, s.numRequests, age, reason))
}

func secs(now, t time.Time) int64 {
	if t.IsZero() {
		return -1
	}
	return now.Unix() - t.Unix()
}

// signalProc signals a child that has not been reaped (so its pid cannot
// have been reused).
func signalProc(proc *process, sig syscall.Signal) {
	if !proc.reaped {
		_ = syscall.Kill(proc.pid, sig)
	}
}

func closeStdin(proc *process) {
	if !proc.stdinClosed {
		proc.stdinClosed = true
		proc.stdin.Close()
	}
}

// reap collects every child that has exited (docs/protocols/mimedefang-multiplexor.md, "Killing and reaping").
func (p *Pool) reap() {
	for _, s := range p.slots {
		proc := s.proc
		if proc == nil || proc.reaped {
			continue
		}
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		pid, err := syscall.Wait4(proc.pid, &ws, syscall.WNOHANG, &ru)
		if err != nil && err != syscall.EINTR && err != syscall.ECHILD {
			p.alog(slog.LevelError, "wait4(%d): %v", proc.pid, err)
			continue
		}
		if pid != proc.pid && err != syscall.ECHILD {
			continue
		}
		proc.reaped = true
		p.elog("reaped worker=%d pid=%d", s.n, proc.pid)
		p.logReaped(s, ws, &ru, s.state == Killed)
		if s.state == Busy && s.call != nil {
			// Let the I/O goroutine report what the worker wrote before it
			// died; its stdout has hit or is about to hit EOF.
			s.reapPending = true
			_ = proc.stdout.SetReadDeadline(time.Now().Add(time.Second))
			continue
		}
		p.finishReap(s)
	}
}

// logReaped is the reference's logWorkerReaped and
// log_worker_resource_usage (with -l only); killed is true for a worker
// that was told to exit (and for every worker at shutdown).
func (p *Pool) logReaped(s *slot, ws syscall.WaitStatus, ru *syscall.Rusage, killed bool) {
	defer p.vlog(slog.LevelInfo, "Worker %d resource usage: req=%d, scans=%d, user=%d.%03d, sys=%d.%03d, nswap=%d, majflt=%d, minflt=%d, maxrss=%d, bi=%d, bo=%d",
		s.n, s.numRequests, s.numScans, ru.Utime.Sec, ru.Utime.Usec/1000, ru.Stime.Sec, ru.Stime.Usec/1000,
		ru.Nswap, ru.Majflt, ru.Minflt, ru.Maxrss, ru.Inblock, ru.Oublock)
	level, extra := slog.LevelDebug, ""
	if !killed {
		level, extra = slog.LevelError, " (WORKER DIED UNEXPECTEDLY)"
	}
	pid := s.proc.pid
	switch {
	case ws.Exited():
		p.vlog(level, "Reap: worker %d (pid %d) exited normally with status %d%s", s.n, pid, ws.ExitStatus(), extra)
	case ws.Signaled() && killed && (ws.Signal() == syscall.SIGTERM || ws.Signal() == syscall.SIGKILL):
		p.vlog(level, "Reap: worker %d (pid %d) exited due to SIGTERM/SIGKILL as expected.", s.n, pid)
	case ws.Signaled():
		p.vlog(level, "Reap: worker %d (pid %d) exited due to signal %d%s", s.n, pid, ws.Signal(), extra)
	default:
		p.vlog(level, "Reap: worker %d (pid %d) exited for unknown reason%s", s.n, pid, extra)
	}
}

func (p *Pool) finishReap(s *slot) {
	proc := s.proc
	closeProc(proc)
	s.killTimer.cancel(p)
	s.deadTimer.cancel(p)
	s.busyTimer.cancel(p)
	s.killTimer, s.deadTimer, s.busyTimer = nil, nil, nil
	if s.state != Killed {
		p.notify("U")
	}
	s.proc = nil
	s.activated, s.firstReq = time.Time{}, time.Time{}
	p.setState(s, Stopped)
	s.dead, s.reapPending = false, false
	// The last command kind stays until the next activation, as the
	// reference's last_cmd does: `workers` shows it on a stopped slot.
	s.cur = Other
	p.stopped = append([]int{s.n}, p.stopped...)
	p.stat(s, "ReapWorker", "")
	p.hist[Scan].add(p.clk.Now(), func(b *bucket) { b.reaped++ })
	if p.running() < p.cfg.MinWorkers {
		p.scheduleBringUp()
	}
	p.serveQueue()
}

// serveQueue dispatches queued requests while a worker can be picked for
// the head of the queue. The reference serves its queue only when a
// worker finishes a command (docs/protocols/mimedefang-multiplexor.md, "After each reply"), so a request queued while every slot
// was busy or being killed waited for its timeout even after a slot came
// free by a reap or a bring-up; sluice serves it then too. A worker that
// cannot be started now (activation spacing, -W, or a failed fork) leaves
// the request queued rather than failing it.
func (p *Pool) serveQueue() {
	for len(p.queue) > 0 {
		c := p.queue[0]
		s := p.findFree(c.kind)
		if s == nil {
			return
		}
		if s.state == Stopped && (!p.mayActivate() || p.activate(s, activationReason(c)) != nil) {
			return
		}
		p.dispatch(s, p.popQueue())
	}
}

// popQueue takes the head of the queue off it, with its queue timeout.
func (p *Pool) popQueue() *call {
	c := p.queue[0]
	p.queue = p.queue[1:]
	c.timer.cancel(p)
	c.timer = nil
	return c
}

// mayActivate: activation spacing (-W) lets a worker start now.
//
// A spacing of whole seconds (-W) is counted as the reference counts it,
// in whole seconds of the clock: an activation at 10.9 s allows the next
// one at 11.0 s.
func (p *Pool) mayActivate() bool {
	spacing := p.cfg.ActivationSpacing
	if spacing <= 0 || p.lastActivation.IsZero() {
		return true
	}
	if spacing%time.Second == 0 {
		return p.now().Unix()-p.lastActivation.Unix() >= int64(spacing/time.Second)
	}
	return p.now().Sub(p.lastActivation) >= spacing
}

// closeProc closes the parent's ends of a reaped worker's pipes, which
// ends its I/O goroutines.
func closeProc(proc *process) {
	closeStdin(proc)
	proc.stdout.Close()
	proc.stderr.Close()
	if proc.status != nil {
		proc.status.Close()
	}
}

// bringUpCheck is docs/protocols/mimedefang-multiplexor.md, "Minimum workers and slow start": start one worker if fewer than min run, and check
// again after SlewTime.
func (p *Pool) bringUpCheck() {
	p.bringUp = nil
	if p.running() >= p.cfg.MinWorkers || len(p.stopped) == 0 {
		return
	}
	_ = p.activate(p.slots[p.stopped[0]], fmt.Sprintf("Bringing workers up to minWorkers (%d)", p.cfg.MinWorkers))
	if p.running() < p.cfg.MinWorkers {
		p.scheduleBringUp()
	}
	p.serveQueue()
}

func (p *Pool) scheduleBringUp() {
	if p.bringUp == nil {
		p.bringUp = p.after(p.cfg.SlewTime, p.bringUpCheck)
	}
}

// idleTimer is docs/protocols/mimedefang-multiplexor.md, "Idle timeout", run every IdleTime from the start.
//
// alive counts the running workers (Killed ones included, as the
// reference's count does) less those this pass kills: a killed worker
// still counts in running() until it is reaped, so the idle pass must
// count its own kills or it would take the pool below MinWorkers.
func (p *Pool) idleTimer() {
	now := p.clk.Now()
	alive := p.running()
	if p.cfg.MaxLifetime > 0 {
		for _, s := range p.idleList() {
			if !s.firstReq.IsZero() && now.Sub(s.firstReq) > p.cfg.MaxLifetime {
				alive--
				p.kill(s, fmt.Sprintf("Worker has exceeded maximum lifetime of %d seconds", int(p.cfg.MaxLifetime/time.Second)))
			}
		}
	}
	for _, s := range p.idleList() {
		if alive <= p.cfg.MinWorkers {
			break
		}
		if now.Sub(s.idleSince) >= p.cfg.IdleTime {
			alive--
			p.kill(s, "Idle timeout")
		}
	}
	if alive < p.cfg.MinWorkers {
		p.scheduleBringUp()
	}
	p.after(p.cfg.IdleTime, p.idleTimer)
}

// idleList is the idle slots in the reference's list order: the most
// recently idle first.
func (p *Pool) idleList() []*slot {
	var idle []*slot
	for _, s := range p.slots {
		if s.state == Idle {
			idle = append(idle, s)
		}
	}
	slices.SortFunc(idle, func(a, b *slot) int { return cmp.Compare(b.idleSeq, a.idleSeq) })
	return idle
}

// reread is docs/protocols/mimedefang-multiplexor.md, "Reread and generations": a new generation, idle workers killed, then R.
func (p *Pool) reread() {
	p.generation++
	for _, s := range p.idleList() {
		p.kill(s, "Forcing reread of filter rules")
	}
	p.notify("R")
}

func (p *Pool) count(st State) int {
	n := 0
	for _, s := range p.slots {
		if s.state == st {
			n++
		}
	}
	return n
}

func (p *Pool) busy() int    { return p.count(Busy) }
func (p *Pool) running() int { return len(p.slots) - p.count(Stopped) }

// shutdown is the SIGTERM sequence of docs/protocols/mimedefang-multiplexor.md, "Signals", minus the socket cleanup
// (the front ends own their sockets).
func (p *Pool) shutdown(sigchld <-chan os.Signal) {
	for _, c := range p.queue {
		c.finish(Result{Err: ErrClosed})
	}
	p.queue = nil
	for _, s := range p.slots {
		if s.call != nil {
			s.call.finish(Result{Err: ErrClosed})
			s.call = nil
		}
		if s.proc != nil {
			signalProc(s.proc, syscall.SIGCONT)
			closeStdin(s.proc)
		}
	}
	steps := []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL}
	for step := 0; ; step++ {
		deadline := time.Now().Add(p.cfg.KillGrace)
		for p.reapAllNow() > 0 && time.Now().Before(deadline) {
			select {
			case <-sigchld:
			case <-time.After(100 * time.Millisecond):
			}
		}
		if p.reapAllNow() == 0 {
			return
		}
		if step >= len(steps) {
			return
		}
		for _, s := range p.slots {
			if s.proc != nil && !s.proc.reaped {
				signalProc(s.proc, steps[step])
			}
		}
		if steps[step] == syscall.SIGKILL {
			// SIGKILL cannot be ignored: wait for the exits.
			for _, s := range p.slots {
				if s.proc != nil && !s.proc.reaped {
					var ws syscall.WaitStatus
					var ru syscall.Rusage
					if pid, _ := syscall.Wait4(s.proc.pid, &ws, 0, &ru); pid == s.proc.pid {
						p.logReaped(s, ws, &ru, true)
					}
					s.proc.reaped = true
				}
			}
			p.reapAllNow()
			return
		}
	}
}

// reapAllNow reaps what has exited during shutdown and returns how many
// children are left.
func (p *Pool) reapAllNow() int {
	left := 0
	for _, s := range p.slots {
		proc := s.proc
		if proc == nil {
			continue
		}
		if !proc.reaped {
			var ws syscall.WaitStatus
			var ru syscall.Rusage
			pid, err := syscall.Wait4(proc.pid, &ws, syscall.WNOHANG, &ru)
			if pid == proc.pid || err == syscall.ECHILD {
				proc.reaped = true
				if pid == proc.pid {
					p.logReaped(s, ws, &ru, true)
				}
			}
		}
		if !proc.reaped {
			left++
			continue
		}
		closeProc(proc)
		s.proc = nil
		p.setState(s, Stopped)
		p.stat(s, "ReapWorker", "")
	}
	return left
}

// Timers: a heap of deadlines served by one clock timer in the loop.

type timerEntry struct {
	when  time.Time
	fn    func()
	c     *call // set instead of fn: the queue timeout of c
	index int   // -1 when not in the heap
}

type timerHeap []*timerEntry

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].when.Before(h[j].when) }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	e := x.(*timerEntry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *timerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}

func (p *Pool) after(d time.Duration, fn func()) *timerEntry {
	return p.schedule(&timerEntry{fn: fn, index: -1}, d)
}

// now is the clock's time, read once per message of the owner loop.
func (p *Pool) now() time.Time {
	if !p.nowSet {
		p.nowT, p.nowSet = p.clk.Now(), true
	}
	return p.nowT
}

// schedule (re)arms e, an entry kept by its user, to fire in d.
func (p *Pool) schedule(e *timerEntry, d time.Duration) *timerEntry {
	e.when = p.now().Add(d)
	if e.index >= 0 {
		heap.Fix(&p.timers, e.index)
	} else {
		heap.Push(&p.timers, e)
	}
	return e
}

func (e *timerEntry) cancel(p *Pool) {
	if e != nil && e.index >= 0 {
		heap.Remove(&p.timers, e.index)
	}
}

func (p *Pool) fireTimers() {
	now := p.now()
	for len(p.timers) > 0 && !p.timers[0].when.After(now) {
		e := heap.Pop(&p.timers).(*timerEntry)
		if e.c != nil {
			p.queueTimeout(e.c)
		} else {
			e.fn()
		}
	}
}
