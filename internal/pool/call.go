package pool

import (
	"time"
)

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
	// sending the result on ch (ticks, Submit).
	onDone func(Result)
	// ownerIO: the owner reads the reply itself (Submit; ownerio.go);
	// cleared at the grant if a goroutine has to hold the I/O instead.
	ownerIO bool

	// Set by the owner when it grants a worker (see io.go).
	slot int
	proc *process
	// io decides who ends a granted call (handoff.go), shared by the
	// owner and the grant's holder; ior is the holder's progress.
	io    handoff
	ior   ioProgress
	watch ctxWatch // the client's (clientIO)
}

// scanPath reports whether c takes the reference's scan path (doScan: the
// activation reason, StartFilter and EndFilter, the queue id and working
// directory): a scan with something after "scan ". A bare "scan " is
// counted as a scan but otherwise handled as any other command.
func (c *call) scanPath() bool { return c.kind == Scan && len(c.req.Line) > len("scan ") }
