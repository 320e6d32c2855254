package pool

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"
)

type slot struct {
	n     int      // the slot's number, as `status` and the logs show it
	state State    // changed only by setState
	proc  *process // the worker in the slot; nil when Stopped
	// lastChange is when state last changed; idleSince when the worker
	// last went idle (the idle timeout counts from it).
	lastChange, idleSince time.Time
	// idleSeq orders idle slots as the reference's idle list does (the
	// most recently idle first), which its worker choice depends on.
	idleSeq uint64

	// start is set while the slot's worker is being started (-E: the
	// zygote forks it); the slot is Stopped and off the stopped list.
	start *slotStart

	life   procLife    // the current process's life, reset by activate
	cmd    slotCommand // the command in flight and what is kept of the last
	timers slotTimers  // the slot's pending timers (nil: none)
}

// slotStart is a worker being started: why, and the request it was
// started for or has since been given (nil: none yet), sent once the
// worker is up (forked).
type slotStart struct {
	reason string
	call   *call
}

// procLife is what a slot keeps about the process it runs now.
type procLife struct {
	activated    time.Time // when the process started
	firstReq     time.Time // its first request (zero before): -V counts from it
	activationNo uint64    // the pool's activation count at its start (oldest first)
	generation   int       // the pool's generation at its start (reread)
	numRequests  int       // requests handled (-r recycles on it)
	numScans     int       // scans among them
	dead         bool      // stdout ended: never chosen again
	reapPending  bool      // reaped while busy: finish once the I/O reports
}

// slotCommand is the command a slot's worker runs, and what the reference
// keeps about the last one.
type slotCommand struct {
	call      *call  // the call in flight while Busy (nil once ended)
	cur, last Kind   // the current command's kind (Other when idle) and the last counted kind
	domain    string // the recipok domain in flight (-y counts it)
	tag       string // the status tag (cleared on every state change)
	// workdir is the scan directory of the last scan (cleared by other
	// client commands): EndFilter is logged only when it is set.
	workdir string
}

// slotTimers are a slot's timer entries in the pool's heap.
type slotTimers struct {
	busy *timerEntry // the busy timeout (-b) while Busy
	// busyEntry is the entry busy points to while set, and busyProc the
	// process it was set for (no allocation per request).
	busyEntry timerEntry
	busyProc  *process
	kill      *timerEntry // the next kill escalation step
	dead      *timerEntry // the kill of an idle worker whose stdout ended
}

// setState is the reference's putOnList: the tag is always cleared; a
// real change is notified (docs/protocols/mimedefang-multiplexor.md, "Notifications": the StateChange line, then F when the free
// count changed, then Z or Y), timed, and counted in the busy histogram.
func (p *Pool) setState(s *slot, st State) {
	s.cmd.tag = ""
	if s.state == st {
		return
	}
	if p.cfg.Notify != nil {
		p.notify(fmt.Sprintf("S %d StateChange %s -> %s", s.n, s.state, st))
	}
	if p.cfg.EventLog != nil {
		p.elog("worker=%d %s -> %s", s.n, s.state, st)
	}
	p.inState[s.state]--
	p.inState[st]++
	s.state = st
	now := p.now()
	s.lastChange = now
	switch st {
	case Busy:
		p.histo[p.busy()-1]++
		if s.life.firstReq.IsZero() {
			s.life.firstReq = now
		}
	case Idle:
		p.idleSeq++
		s.idleSeq = p.idleSeq
	}
	free := p.count(Idle) + p.count(Stopped)
	if free != p.oldFree && p.cfg.Notify != nil {
		p.notify("F " + strconv.Itoa(free))
	}
	if free == 0 {
		p.notify("Z")
	}
	if p.oldFree == 0 && free != 0 {
		p.notify("Y")
	}
	p.oldFree = free
}

// idleList is the idle slots in the reference's list order: the most
// recently idle first.
func (p *Pool) idleList() []*slot {
	var idle []*slot
	for _, s := range p.slots {
		if s.state == Idle {
			idle = append(idle, s)
		}
	}
	slices.SortFunc(idle, func(a, b *slot) int { return cmp.Compare(b.idleSeq, a.idleSeq) })
	return idle
}

func (p *Pool) count(st State) int { return p.inState[st] }

func (p *Pool) busy() int { return p.count(Busy) }

func (p *Pool) running() int { return len(p.slots) - p.count(Stopped) }
