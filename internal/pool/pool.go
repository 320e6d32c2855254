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
	// in carries calls and functions to run to the owner loop, in the
	// order they were sent. It is buffered: a sender rarely waits, and the
	// owner takes what has come in a batch (Run). tags carries the status
	// updates read from -Z pipes.
	in   chan ownerMsg
	tags chan tagEvent
	// inMu and inClosed make Submit and the owner's stop agree on every
	// call's end (drainInbox).
	inMu     sync.RWMutex
	inClosed bool
	// react is the owner's epoll set (reactor.go), made by Run.
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

	// zyg is -E's Perl process (embed.go), started at the first
	// activation and at a reread; embedOff once it failed to start.
	// zygGone are the zygotes dropped and not reaped yet; starting
	// counts the slots whose worker is being forked (slot.start).
	zyg      *zygote
	zygGone  []*zygote
	embedOff bool
	starting int

	ema         float64
	lastScaleIn time.Time
}

// Do is Submit and a wait for the outcome: ErrClosed when ctx ends or
// the pool stops first. A call whose client left still runs to its end
// on the owner, which drops its result.
func (p *Pool) Do(ctx context.Context, req Request) Result {
	ch := make(chan Result, 1)
	if !p.Submit(req, func(r Result) { ch <- r }) {
		return Result{Err: ErrClosed}
	}
	select {
	case r := <-ch:
		return r
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
