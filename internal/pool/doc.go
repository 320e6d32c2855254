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
// bookkeeping) after writing the command to the worker as far as its
// stdin pipe takes it at once, the client writes the rest (if any) and
// reads the reply on the worker's pipes, then claims the call with an
// atomic state change and reports the outcome to the owner in one
// message, before it returns. The
// owner can still end the call first (busy timeout, kill, shutdown): it
// claims the call, answers the client itself and interrupts the client's
// read; every such claim kills the worker. A client whose context ends
// hands its unfinished read to a helper goroutine. io.go has the whole
// protocol, handoff.go the claim.
//
// A call made with Submit has no waiting client: the owner itself holds
// its I/O. It watches the worker's stdout in an epoll set of its own (the
// reactor, reactor.go), polled between messages, reads the reply when it
// comes and ends the call with the same claim and bookkeeping a client's
// report gets; the call's done function, run on the owner, answers the
// front end's client (ownerio.go). A forwarded request then costs the
// owner a few system calls and no goroutine switch.
//
// A front end may go further and serve its clients on the owner itself
// (owner.go): OnOwner runs its code there, and an Owner lets it watch its
// own descriptors in the reactor (the mux's listening socket, and
// connections whose request is not in yet), bound their waits with the
// owner's timers, and submit or take a snapshot without the inbox. The
// owner is then one epoll loop over the workers' stdout and the front
// end's clients, as a single-threaded multiplexor is.
//
// # Who owns what
//
//   - The owner goroutine (Run, loop.go) alone reads and writes every
//     slot, the stopped list, the queue, the timer heap, the load
//     histories and the counters. Everything else reaches them through
//     Pool.in (calls, I/O events, functions run by exec) or Pool.tags.
//     Config.Notify, Config.Stats and Config.Events are called on it
//     (Events also from the stderr readers, for EvStderr).
//   - A granted call's process pipes and buffers (process.buf, wbuf and
//     the raw I/O fields of rawio.go) are the owner's until it grants the
//     call (it writes the command's first bytes, preWrite), then belong
//     to the grant's holder until
//     the call's handoff leaves running: the client in Do, a helper once
//     the client left (finishAbandoned), a tick's goroutine, or for a
//     Submit call the owner itself (which never gives them up).
//   - The reactor (its epoll set, its watches and process.rfd) is the
//     owner's, but for its waiter goroutine, which only waits for the
//     set to be readable and kicks the owner. A front end's watched
//     descriptors are the front end's, used in code the owner runs, or,
//     once the owner loop has ended, by whatever ends the front end.
//   - Each process has a stderr reader (drainStderr) and, with -Z, a
//     status reader (readStatus); they share only process.qid and
//     process.oom (atomics) and send on Pool.tags.
//   - Context watch groups (watch.go) are guarded by Pool.wmu.
//   - Every goroutine the pool starts is counted in Pool.wg, which Run
//     waits for before it returns.
//
// # Slot states
//
// A slot changes state only through setState, on the owner goroutine:
//
//	Stopped -> Idle    activate: a process starts (the slot leaves the stopped list)
//	Idle    -> Busy    dispatch: a call is granted, the busy timer armed
//	Busy    -> Idle    handleIO: the call ended with a reply or its worker's EOF
//	Idle    -> Killed  kill: idle timeout, recycling, reread, dead stdout, autoscale
//	Busy    -> Killed  kill: busy timeout, error talking to the worker
//	any     -> Stopped finishReap (or reapAllNow at shutdown): the process was reaped
//
// and while Run serves, these hold between two messages of the owner loop
// (export_test.go checks them whenever a test looks at the states):
//
//   - state is Stopped exactly when proc is nil, and exactly the Stopped
//     slots are on the stopped list;
//   - a slot has a call in flight (cmd.call) or a busy timer only when
//     Busy; an Idle slot's current kind is Other;
//   - a Killed slot is never chosen for a request; its kill timer
//     escalates (SIGTERM, SIGKILL) until it is reaped;
//   - a queued call is queued only while no worker could take it, and
//     has a queue timeout in the heap.
package pool
