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
