package pool

import "sync/atomic"

// handoff decides who ends a granted call: the goroutine that holds the
// grant and does the worker I/O (the holder: the client in Do, a helper
// once the client left, or a tick's goroutine), or the owner loop (busy
// timeout, kill, shutdown). Exactly one of them claims the call, and its
// result is the one the client gets; io.go describes the whole protocol.
//
// The four states and the only transitions:
//
//	running   --abandon-->      abandoned   the client left (its ctx ended)
//	running   --claimHolder-->  holder      the holder's result stands
//	abandoned --claimHolder-->  holder      (the helper finished the I/O)
//	running   --claimOwner-->   owner       the owner ended the call
//	abandoned --claimOwner-->   owner
//
// holder and owner are final. The zero value is running.
type handoff struct{ state atomic.Int32 }

// The states of a handoff.
const (
	hoRunning   int32 = iota // the holder does the worker I/O
	hoHolder                 // the holder finished and its result stands
	hoOwner                  // the owner ended the call and sent its result
	hoAbandoned              // the client left; a helper finishes the I/O
)

// claimOwner is the owner ending the call: true if it now owns the
// outcome (it must then answer the client and interrupt the holder's
// read), false if the holder claimed it first.
func (h *handoff) claimOwner() bool { return h.claim(hoOwner) }

// claimHolder is the holder ending the call with its own result: true if
// that result stands, false if the owner claimed the call first (the
// owner's result is then on its way to the client).
func (h *handoff) claimHolder() bool { return h.claim(hoHolder) }

func (h *handoff) claim(to int32) bool {
	for {
		s := h.state.Load()
		if s != hoRunning && s != hoAbandoned {
			return false
		}
		if h.state.CompareAndSwap(s, to) {
			return true
		}
	}
}

// abandon marks a running call as left by its client: true if it was
// running (the caller then interrupts the holder's read so that the I/O
// can be handed to a helper).
func (h *handoff) abandon() bool { return h.state.CompareAndSwap(hoRunning, hoAbandoned) }

// abandoned reports whether the client left and nobody has claimed the
// call yet.
func (h *handoff) abandoned() bool { return h.state.Load() == hoAbandoned }
