// Package pool runs a pool of filter worker processes the way
// mimedefang-multiplexor does: a fixed array of slots (Stopped, Idle, Busy,
// Killed), one line-protocol command per busy worker over its stdin and
// stdout, a FIFO queue, busy and idle timeouts, recycling and reaping.
//
// One owner goroutine holds every slot, the queue and the timers; worker
// I/O goroutines and clients talk to it over channels. Timers come from an
// injected clock.Clock. Children are reaped with wait4(WNOHANG) on SIGCHLD.
package pool

import (
	"container/heap"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
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
	// previous start (0: no spacing).
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
	req   Request
	kind  Kind
	done  chan Result
	timer *timerEntry // queue timeout while queued
	start time.Time   // clock time of dispatch
}

func (c *call) finish(r Result) { c.done <- r }

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
	killTimer    *timerEntry
	deadTimer    *timerEntry
	dead         bool // stdout ended: never chosen again
	reapPending  bool // reaped while busy: finish once the I/O reports
}

// Pool is a running worker pool. Create it with New and run it with Run.
type Pool struct {
	cfg   Config
	clk   clock.Clock
	log   *slog.Logger
	calls chan *call
	ctl   chan func()
	// events carries worker I/O results to the owner loop.
	events chan ioEvent
	done   chan struct{} // closed when the owner loop has exited
	wg     sync.WaitGroup

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
		cfg:    cfg,
		clk:    cfg.Clock,
		log:    cfg.Logger,
		calls:  make(chan *call),
		ctl:    make(chan func()),
		events: make(chan ioEvent),
		done:   make(chan struct{}),
		histo:  make([]int, cfg.MaxWorkers),
	}
	for i := range cfg.MaxWorkers {
		p.slots = append(p.slots, &slot{n: i})
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
	c := &call{req: req, kind: KindOf(req.Line), done: make(chan Result, 1)}
	select {
	case p.calls <- c:
	case <-p.done:
		return Result{Err: ErrClosed}
	case <-ctx.Done():
		return Result{Err: ErrClosed}
	}
	select {
	case r := <-c.done:
		return r
	case <-p.done:
		return Result{Err: ErrClosed}
	case <-ctx.Done():
		return Result{Err: ErrClosed}
	}
}

// Reread starts a new generation, as the `reread` command and SIGINT do:
// idle workers are killed now, busy ones when they finish.
func (p *Pool) Reread() { p.exec(p.reread) }

// exec runs f on the owner goroutine and waits for it (a no-op once the
// pool has stopped).
func (p *Pool) exec(f func()) bool {
	fin := make(chan struct{})
	select {
	case p.ctl <- func() { f(); close(fin) }:
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
	}()
	p.start = p.clk.Now()
	for _, s := range p.slots {
		s.lastChange = p.start
	}
	p.log.Info("started", "minWorkers", p.cfg.MinWorkers, "maxWorkers", p.cfg.MaxWorkers,
		"maxRequests", p.cfg.MaxRequests, "maxLifetime", p.cfg.MaxLifetime, "maxIdleTime", p.cfg.IdleTime,
		"busyTimeout", p.cfg.BusyTimeout, "clientTimeout", p.cfg.CmdTimeout)
	p.bringUpCheck()
	p.after(p.cfg.IdleTime, p.idleTimer)

	var timer clock.Timer
	var armed time.Time
	for {
		var tc <-chan time.Time
		if len(p.timers) > 0 {
			when := p.timers[0].when
			if timer == nil || !when.Equal(armed) {
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
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			p.shutdown(sigchld)
			return nil
		case c := <-p.calls:
			p.submit(c)
		case f := <-p.ctl:
			f()
		case ev := <-p.events:
			p.handleIO(ev)
		case <-sigchld:
			p.reap()
		case <-tc:
			timer = nil
			p.fireTimers()
		}
	}
}

// submit is §2.4: cap per domain, choose a worker, queue or refuse.
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
				c.finish(Result{Err: ErrDomainLimit})
				return
			}
		}
	}
	s := p.findFree(c.kind)
	if s == nil {
		if c.req.Queue && len(p.queue) < p.cfg.QueueSize {
			p.queue = append(p.queue, c)
			c.timer = p.after(p.cfg.QueueTimeout, func() { p.queueTimeout(c) })
			p.log.Debug("All workers are busy: Queueing request", "queued", len(p.queue))
			return
		}
		p.log.Debug("No free workers")
		c.finish(Result{Err: ErrNoFreeWorkers})
		return
	}
	p.dispatch(s, c, "")
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

// findFree is §4.3: an idle worker whose last command kind matches (or
// which has run nothing), oldest first; else the oldest idle worker; else
// the first stopped slot.
func (p *Pool) findFree(k Kind) *slot {
	var best, oldest *slot
	for _, s := range p.slots {
		if s.state != Idle || s.dead || s.reapPending {
			continue
		}
		if oldest == nil || s.activationNo < oldest.activationNo {
			oldest = s
		}
		if (s.last == k || s.last == Other) && (best == nil || s.activationNo < best.activationNo) {
			best = s
		}
	}
	if best != nil {
		return best
	}
	if oldest != nil {
		return oldest
	}
	if len(p.stopped) > 0 {
		return p.slots[p.stopped[0]]
	}
	return nil
}

// dispatch starts s if needed and sends c's command to it.
func (p *Pool) dispatch(s *slot, c *call, _ string) {
	if s.state == Stopped {
		reason := "About to execute command '" + truncate(c.req.Line+"\n", 100) + "'"
		if c.kind == Scan {
			reason = "About to perform scan"
		}
		if err := p.activate(s, reason); err != nil {
			c.finish(Result{Err: ErrActivate})
			return
		}
	}
	now := p.clk.Now()
	s.numRequests++
	if s.firstReq.IsZero() {
		s.firstReq = now
	}
	p.setState(s, Busy)
	s.cur = c.kind
	if c.kind != Other {
		s.last = c.kind
	}
	s.domain = ""
	if c.kind == RecipOK {
		s.domain, _ = RecipokDomain(c.req.Line)
	}
	s.tag = commandTag(c.req.Line)
	s.call = c
	c.start = now
	p.histo[p.busy()-1]++
	proc := s.proc
	s.busyTimer = p.after(p.cfg.BusyTimeout, func() { p.busyTimeout(s, proc) })
	proc.jobs <- c.req.Line + "\n"
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// activate starts a process in the stopped slot s.
func (p *Pool) activate(s *slot, reason string) error {
	now := p.clk.Now()
	if p.cfg.ActivationSpacing > 0 && !p.lastActivation.IsZero() && now.Sub(p.lastActivation) < p.cfg.ActivationSpacing {
		p.log.Debug("not starting a worker: too soon after the previous start", "worker", s.n)
		return fmt.Errorf("pool: activation spacing")
	}
	proc, err := spawn(&p.cfg)
	if err != nil {
		p.log.Error("cannot start worker", "worker", s.n, "err", err)
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
	p.log.Info(fmt.Sprintf("Starting worker %d (pid %d) (%d running): %s", s.n, proc.pid, p.running(), reason))
	p.wg.Add(2)
	go p.serveIO(s.n, proc)
	go p.drainStderr(s.n, proc.stderr)
	return nil
}

func (p *Pool) setState(s *slot, st State) {
	if s.state != st {
		p.log.Debug(fmt.Sprintf("S %d StateChange %s -> %s", s.n, s.state, st))
	}
	s.state = st
	s.lastChange = p.clk.Now()
	s.tag = ""
}

// handleIO is the end of a command on a worker (§2.4, §4.4).
func (p *Pool) handleIO(ev ioEvent) {
	s := p.slots[ev.slot]
	if s.proc != ev.proc || s.state != Busy || s.call == nil {
		return // a killed worker's late answer
	}
	c := s.call
	s.call = nil
	s.busyTimer.cancel(p)
	s.busyTimer = nil
	var r Result
	switch {
	case ev.writeErr != nil:
		r.Err = ErrTalk
	case ev.eof && len(ev.reply) == 0:
		r.Err = ErrNoResponse
		s.dead = true
	default:
		r.Reply = ev.reply
		if ev.eof {
			s.dead = true
		}
	}
	p.finishCommand(s, c)
	c.finish(r)
	if ev.writeErr != nil {
		p.kill(s, "Error talking to worker process")
		return
	}
	p.setState(s, Idle)
	s.idleSince = p.clk.Now()
	s.cur = Other
	if s.reapPending {
		p.finishReap(s)
		return
	}
	if s.dead {
		// Its stdout is gone: it is never chosen again, and if it does not
		// exit by itself it is killed.
		proc := s.proc
		s.deadTimer = p.after(p.cfg.KillGrace, func() {
			if s.proc == proc && s.state == Idle {
				p.kill(s, "EventTcp_ReadBuf failed")
			}
		})
		return
	}
	p.checkExpiry(s)
}

// finishCommand counts a command that ended (answered, timed out or died).
func (p *Pool) finishCommand(s *slot, c *call) {
	now := p.clk.Now()
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

// checkExpiry is §4.4: serve the queue (unless this worker is far past its
// request limit), else recycle on request count, lifetime or generation.
func (p *Pool) checkExpiry(s *slot) {
	if len(p.queue) > 0 && s.numRequests < 3*p.cfg.MaxRequests {
		c := p.queue[0]
		p.queue = p.queue[1:]
		c.timer.cancel(p)
		if t := p.findFree(c.kind); t != nil {
			p.dispatch(t, c, "")
		} else {
			c.finish(Result{Err: ErrNoFreeWorkers})
		}
		return
	}
	now := p.clk.Now()
	switch {
	case s.numRequests >= p.cfg.MaxRequests:
		p.kill(s, fmt.Sprintf("Worker has processed %d requests", s.numRequests))
	case p.cfg.MaxLifetime > 0 && !s.firstReq.IsZero() && now.Sub(s.firstReq) > p.cfg.MaxLifetime:
		p.kill(s, fmt.Sprintf("Worker has exceeded maximum lifetime of %d seconds", int(p.cfg.MaxLifetime/time.Second)))
	case s.generation < p.generation:
		p.kill(s, "New generation -- forcing reread of filter rules")
	}
}

// busyTimeout is §4.7.
func (p *Pool) busyTimeout(s *slot, proc *process) {
	s.busyTimer = nil
	if s.proc != proc || s.state != Busy || s.call == nil {
		return
	}
	c := s.call
	s.call = nil
	busy := p.busy()
	p.finishCommand(s, c)
	c.finish(Result{Err: ErrBusyTimeout, BusyWorkers: busy})
	p.kill(s, "Busy timeout")
}

// kill is §4.5: SIGCONT (and SIGTERM at once if busy), close stdin, then
// escalate every KillGrace until the process is reaped.
func (p *Pool) kill(s *slot, reason string) {
	proc := s.proc
	if proc == nil || s.state == Killed {
		return
	}
	wasBusy := s.state == Busy
	now := p.clk.Now()
	p.log.Info(fmt.Sprintf("Killing %s worker %d (pid %d) req=%d age=%d req_age=%d: %s",
		strings.ToLower(s.state.String()), s.n, proc.pid, s.numRequests, secs(now, s.activated), secs(now, s.firstReq), reason))
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
			signalProc(proc, syscall.SIGKILL)
			return
		}
		p.log.Info(fmt.Sprintf("Worker %d (pid %d) taking too long to exit; sending SIGTERM", s.n, proc.pid))
		signalProc(proc, syscall.SIGTERM)
		s.killTimer = p.after(p.cfg.KillGrace, func() {
			if s.proc == proc && !proc.reaped {
				signalProc(proc, syscall.SIGCONT)
				signalProc(proc, syscall.SIGKILL)
			}
		})
	})
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

// reap collects every child that has exited (§4.5).
func (p *Pool) reap() {
	for _, s := range p.slots {
		proc := s.proc
		if proc == nil || proc.reaped {
			continue
		}
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(proc.pid, &ws, syscall.WNOHANG, nil)
		if err != nil && err != syscall.EINTR && err != syscall.ECHILD {
			p.log.Error("wait4", "pid", proc.pid, "err", err)
			continue
		}
		if pid != proc.pid && err != syscall.ECHILD {
			continue
		}
		proc.reaped = true
		unexpected := ""
		if s.state != Killed {
			unexpected = " (WORKER DIED UNEXPECTEDLY)"
		}
		if ws.Signaled() {
			p.log.Info(fmt.Sprintf("Reap: worker %d (pid %d) exited due to signal %d%s", s.n, proc.pid, ws.Signal(), unexpected))
		} else {
			p.log.Info(fmt.Sprintf("Reap: worker %d (pid %d) exited normally with status %d%s", s.n, proc.pid, ws.ExitStatus(), unexpected))
		}
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

func (p *Pool) finishReap(s *slot) {
	proc := s.proc
	closeStdin(proc)
	proc.stdout.Close()
	proc.stderr.Close()
	close(proc.jobs)
	s.killTimer.cancel(p)
	s.deadTimer.cancel(p)
	s.busyTimer.cancel(p)
	s.killTimer, s.deadTimer, s.busyTimer = nil, nil, nil
	p.setState(s, Stopped)
	s.proc = nil
	s.activated, s.firstReq = time.Time{}, time.Time{}
	s.dead, s.reapPending = false, false
	s.cur, s.last = Other, Other
	p.stopped = append([]int{s.n}, p.stopped...)
	p.hist[Scan].add(p.clk.Now(), func(b *bucket) { b.reaped++ })
	if p.running() < p.cfg.MinWorkers {
		p.scheduleBringUp()
	}
}

// bringUpCheck is §4.2: start one worker if fewer than min run, and check
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
}

func (p *Pool) scheduleBringUp() {
	if p.bringUp == nil {
		p.bringUp = p.after(p.cfg.SlewTime, p.bringUpCheck)
	}
}

// idleTimer is §4.8, run every IdleTime from the start.
func (p *Pool) idleTimer() {
	now := p.clk.Now()
	if p.cfg.MaxLifetime > 0 {
		for _, s := range p.slots {
			if s.state == Idle && !s.firstReq.IsZero() && now.Sub(s.firstReq) > p.cfg.MaxLifetime {
				p.kill(s, fmt.Sprintf("Worker has exceeded maximum lifetime of %d seconds", int(p.cfg.MaxLifetime/time.Second)))
			}
		}
	}
	for _, s := range p.slots {
		if p.running() <= p.cfg.MinWorkers {
			break
		}
		if s.state == Idle && now.Sub(s.idleSince) >= p.cfg.IdleTime {
			p.kill(s, "Idle timeout")
		}
	}
	if p.running() < p.cfg.MinWorkers {
		p.scheduleBringUp()
	}
	p.after(p.cfg.IdleTime, p.idleTimer)
}

// reread is §4.11.
func (p *Pool) reread() {
	p.generation++
	for _, s := range p.slots {
		if s.state == Idle {
			p.kill(s, "Forcing reread of filter rules")
		}
	}
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

// shutdown is the SIGTERM sequence of §8.2, minus the socket cleanup
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
					_, _ = syscall.Wait4(s.proc.pid, &ws, 0, nil)
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
			pid, err := syscall.Wait4(proc.pid, &ws, syscall.WNOHANG, nil)
			if pid == proc.pid || err == syscall.ECHILD {
				proc.reaped = true
			}
		}
		if !proc.reaped {
			left++
			continue
		}
		closeStdin(proc)
		proc.stdout.Close()
		proc.stderr.Close()
		close(proc.jobs)
		s.proc = nil
		s.state = Stopped
	}
	return left
}

// Timers: a heap of deadlines served by one clock timer in the loop.

type timerEntry struct {
	when  time.Time
	fn    func()
	index int // -1 when not in the heap
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
	e := &timerEntry{when: p.clk.Now().Add(d), fn: fn}
	heap.Push(&p.timers, e)
	return e
}

func (e *timerEntry) cancel(p *Pool) {
	if e != nil && e.index >= 0 {
		heap.Remove(&p.timers, e.index)
	}
}

func (p *Pool) fireTimers() {
	now := p.clk.Now()
	for len(p.timers) > 0 && !p.timers[0].when.After(now) {
		e := heap.Pop(&p.timers).(*timerEntry)
		e.fn()
	}
}
