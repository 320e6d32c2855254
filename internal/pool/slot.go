package pool

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"
)

type slot struct {
	n            int
	state        State
	proc         *process
	numRequests  int
	numScans     int
	activated    time.Time
	firstReq     time.Time
	idleSince    time.Time
	lastChange   time.Time
	activationNo uint64
	generation   int
	tag          string
	cur, last    Kind
	domain       string
	call         *call
	busyTimer    *timerEntry
	// busyT is the entry busyTimer points to while set, and busyProc the
	// process it was set for (no allocation per request).
	busyT       timerEntry
	busyProc    *process
	killTimer   *timerEntry
	deadTimer   *timerEntry
	dead        bool // stdout ended: never chosen again
	reapPending bool // reaped while busy: finish once the I/O reports
	// idleSeq orders idle slots as the reference's idle list does (the
	// most recently idle first), which its worker choice depends on.
	idleSeq uint64
	// workdir is the scan directory of the last scan (cleared by other
	// client commands): EndFilter is logged only when it is set.
	workdir string
}

// setState is the reference's putOnList: the tag is always cleared; a
// real change is notified (docs/protocols/mimedefang-multiplexor.md, "Notifications": the StateChange line, then F when the free
// count changed, then Z or Y), timed, and counted in the busy histogram.
func (p *Pool) setState(s *slot, st State) {
	s.tag = ""
	if s.state == st {
		return
	}
	if p.cfg.Notify != nil {
		p.notify(fmt.Sprintf("S %d StateChange %s -> %s", s.n, s.state, st))
	}
	if p.cfg.EventLog != nil {
		p.elog("worker=%d %s -> %s", s.n, s.state, st)
	}
	s.state = st
	now := p.now()
	s.lastChange = now
	switch st {
	case Busy:
		p.histo[p.busy()-1]++
		if s.firstReq.IsZero() {
			s.firstReq = now
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

func (p *Pool) count(st State) int {
	n := 0
	for _, s := range p.slots {
		if s.state == st {
			n++
		}
	}
	return n
}

func (p *Pool) busy() int { return p.count(Busy) }

func (p *Pool) running() int { return len(p.slots) - p.count(Stopped) }
