package pool

import (
	"context"
	"sync"
	"time"

	"sluice/internal/clock"
)

// Pool is a running worker pool. Create it with New and run it with Run.
type Pool struct {
	cfg Config
	clk clock.Clock
	// in carries calls, worker I/O results and functions to run to the
	// owner loop, in the order they were sent (so a client that reported
	// its worker's reply and then asks for a snapshot sees the worker
	// idle). It is buffered: a sender rarely waits, and the owner takes
	// what has come in a batch (Run). tags carries the status updates
	// read from -Z pipes.
	in   chan ownerMsg
	tags chan tagEvent
	// inMu and inClosed make Submit and the owner's stop agree on every
	// call's end (drainInbox).
	inMu     sync.RWMutex
	inClosed bool
	// react is the owner's epoll set for the replies it reads itself
	// (Submit; reactor.go); nil outside Run, or if it could not be made
	// (a goroutine then holds each such call's I/O).
	react *reactor
	done  chan struct{} // closed when the owner loop has exited
	wg    sync.WaitGroup

	// Owned by the loop goroutine.
	slots          []*slot
	stopped        []int  // Stopped slots, the next to start first
	inState        [4]int // the number of slots in each State (setState keeps it)
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
	tbase          time.Time // timers.go: what timerEntry.at counts from
	oldFree        int       // free slots after the last state change (-1: none yet)
	idleSeq        uint64    // source of slot.idleSeq
	idleBuf        []*slot   // findFree's scratch
	reapBuf        []*slot   // reapOrder's scratch
	// nowT is the clock's time for the message being handled (nowSet):
	// one reading of the clock serves all of its bookkeeping.
	nowT   time.Time
	nowSet bool

	ema         float64
	lastScaleIn time.Time

	// wmu guards groups, the watch groups of clients' contexts (io.go).
	wmu    sync.Mutex
	groups map[<-chan struct{}]*watchGroup
}

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
