package pool

import (
	"time"
)

// call is one request in the pool, the owner's from the moment it is
// handled: queued, in flight on a worker (slot, proc), then ended once
// with finish.
type call struct {
	req  Request
	kind Kind
	// done gets the outcome on the owner goroutine (finish).
	done  func(Result)
	timer *timerEntry // queue timeout while queued (qtimer)
	// qtimer is the queue timeout's timer entry, kept in the call so that
	// queueing allocates no entry.
	qtimer timerEntry
	start  time.Time // clock time of dispatch
	// tick is the band of an internal tick request (docs/protocols/mimedefang-multiplexor.md, "Ticks"), -1 otherwise.
	tick int
	// Set by dispatch: the worker's slot and process.
	slot int
	proc *process
}

func newCall(req Request, done func(Result)) *call {
	return &call{req: req, kind: KindOf(req.Line), tick: -1, done: done}
}

// finish ends c with r: its done runs, once.
func (c *call) finish(r Result) {
	if d := c.done; d != nil {
		c.done = nil
		d(r)
	}
}

// scanPath reports whether c takes the reference's scan path (doScan: the
// activation reason, StartFilter and EndFilter, the queue id and working
// directory): a scan with something after "scan ". A bare "scan " is
// counted as a scan but otherwise handled as any other command.
func (c *call) scanPath() bool { return c.kind == Scan && len(c.req.Line) > len("scan ") }
