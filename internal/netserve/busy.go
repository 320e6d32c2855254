package netserve

import "sync/atomic"

// On one processor the set's waiter (or a session's call in its place,
// poller.lead) waits in a raw system call only while it is the one thing
// the process has to wait for (poller.wait, rawAllowed): every goroutine
// of netserve's (a session's handler, an accept loop, a refusal) is
// parked in netserve on a wake that the waiter or a timer delivers. The
// poller's busy count is how many are not: a goroutine counts from its
// start until it ends, except while it waits on a waitSlot. A goroutine
// that is busy may be waiting for something the runtime's poller or
// scheduler delivers (a store on the network, a lock, a queue's slot, a
// sleep), which a raw wait holding the processor would hold up; the
// waiter then parks on the runtime's poller as before.

// waitSlot is where one goroutine of netserve's waits for a wake: it
// leaves the busy count when it waits (enter) and comes back when it is
// woken (leave, called by whoever wakes it, before the wake, and by the
// goroutine once it is awake: a wake it did not see, a timer's or one left
// for its next park, leaves its slot then).
type waitSlot struct {
	busy    *atomic.Int64 // the poller's count; nil: not counted
	waiting atomic.Bool
}

func (w *waitSlot) enter() {
	if w.busy != nil && w.waiting.CompareAndSwap(false, true) {
		w.busy.Add(-1)
	}
}

func (w *waitSlot) leave() {
	if w.busy != nil && w.waiting.CompareAndSwap(true, false) {
		w.busy.Add(1)
	}
}
