// Package pool runs a pool of filter worker processes the way
// mimedefang-multiplexor does: a fixed array of slots (Stopped, Idle, Busy,
// Killed), one line-protocol command per busy worker over its stdin and
// stdout, a FIFO queue, busy and idle timeouts, recycling and reaping.
//
// # One owner
//
// One goroutine, the owner (Run, loop.go), holds every slot, the queue,
// the timers and every worker's stdin and stdout: it writes each command
// and reads each reply itself, through its own epoll set (the reactor,
// reactor.go), between the messages of its inbox, as a single-threaded
// multiplexor does. Clients reach it over the inbox: Submit (the outcome
// comes to a function run on the owner) and Do (Submit and a wait);
// a front end may run its own code on the owner (OnOwner and Owner,
// owner.go: the mux's main socket is served there). Timers come from the
// injected clock.Clock; children are reaped with wait4(WNOHANG) on
// SIGCHLD. With Embed (-E) a worker is forked by one Perl process that
// compiled the program once (embed.go), and reaped as any other; that
// process's answers (its compile done, each worker forked) are read
// through the reactor under owner timers, and it is reaped on SIGCHLD.
//
// What the types enforce: a worker's pipes and buffers are fields of its
// process (workerio.go), and only the owner holds a *process; the
// goroutines that read a worker's stderr and -Z status pipe are given its
// procSide, which holds nothing of the request I/O (the queue id and the
// out-of-memory mark they share are atomics). A reply is copied out of
// the worker's buffer before it is given to the client, which owns it.
//
// The other goroutines: the reactor's waiter (parks on the epoll
// descriptor when the owner has nothing else to do), the stderr and
// status readers, and nothing else; every one is counted in Pool.wg,
// which Run waits for before it returns.
//
// # Slot states
//
// A slot changes state only through setState, on the owner goroutine:
//
//	Stopped -> Idle    activate: a process starts (the slot leaves the stopped list;
//	                   with -E it is off the list, start set, until the zygote's answer: forked)
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
//     slots whose worker is not being started (start) are on the stopped
//     list;
//   - a slot has a call in flight (cmd.call) or a busy timer only when
//     Busy; an Idle slot's current kind is Other;
//   - a Killed slot is never chosen for a request; its kill timer
//     escalates (SIGTERM, SIGKILL) until it is reaped;
//   - a queued call is queued only while no worker could take it, and
//     has a queue timeout in the heap.
package pool
