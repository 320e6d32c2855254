package pool

import (
	"time"
)

// SlotInfo is one slot as the status commands show it.
type SlotInfo struct {
	State       State
	PID         int       // 0 when stopped
	Current     Kind      // the kind of the command in flight (Other when none)
	Last        Kind      // the kind of the last counted command
	NumRequests int       // requests this activation served
	NumScans    int       // scans among them
	Activated   time.Time // zero when stopped
	FirstReq    time.Time // zero before the first request
	LastChange  time.Time // when State last changed
	Tag         string    // the status tag (the command's, a tick's, or the worker's own with -Z)
}

// Snapshot is the pool's state at one moment, for the status commands.
type Snapshot struct {
	Now         time.Time  // the pool's clock when the snapshot was taken
	Start       time.Time  // when Run began
	Slots       []SlotInfo // every slot, by number
	Msgs        int        // scans since the start
	Activations uint64     // workers started since the start
	QueueSize   int        // the queue's capacity (-q)
	Queued      int        // requests waiting in the queue
	// Histo[i] counts how often a worker went busy while exactly i+1
	// workers were busy.
	Histo []int
	// Autoscale is -k; EMABusy the moving average of the busy share of
	// running workers it acts on (docs/protocols/mimedefang-multiplexor.md, "Autoscaling").
	Autoscale bool
	EMABusy   float64
	// Loads holds the windows asked of SnapshotLoad, in the order asked.
	Loads []Window
}

// LoadQuery asks SnapshotLoad for one window of kind Kind's history: the
// last Back seconds (10..600 are meaningful), or with Hours the last Back
// hours (1..24).
type LoadQuery struct {
	Kind  Kind
	Back  int
	Hours bool
}

// Snapshot copies the pool's slots and counters (not its load
// histories: see SnapshotLoad); ok is false once the pool has stopped.
// It is what every status command but the load ones needs, and the
// milter asks for `free` on every SMTP connection, so it stays small.
func (p *Pool) Snapshot() (snap Snapshot, ok bool) {
	return p.SnapshotLoad()
}

// SnapshotLoad is Snapshot plus the windows qs of the load histories,
// computed on the owner goroutine (the histories themselves, about 200 KB,
// are never copied).
func (p *Pool) SnapshotLoad(qs ...LoadQuery) (snap Snapshot, ok bool) {
	ok = p.exec(func() { snap = p.snapshot(qs) })
	return snap, ok
}

// snapshot is the pool's state now, with the load windows qs (owner only).
func (p *Pool) snapshot(qs []LoadQuery) Snapshot {
	var snap Snapshot
	p.snapshotInto(&snap, qs)
	return snap
}

// snapshotInto is snapshot into sn, whose slices it reuses.
func (p *Pool) snapshotInto(sn *Snapshot, qs []LoadQuery) {
	*sn = Snapshot{
		Now: p.clk.Now(), Start: p.start, Msgs: p.msgs, Activations: p.activations,
		QueueSize: p.cfg.QueueSize, Queued: len(p.queue), Histo: append(sn.Histo[:0], p.histo...),
		Autoscale: p.cfg.Autoscale, EMABusy: p.ema, Slots: sn.Slots[:0], Loads: sn.Loads[:0],
	}
	for _, s := range p.slots {
		si := SlotInfo{State: s.state, Current: s.cmd.cur, Last: s.cmd.last, NumRequests: s.life.numRequests,
			NumScans: s.life.numScans, Activated: s.life.activated, FirstReq: s.life.firstReq, LastChange: s.lastChange, Tag: s.cmd.tag}
		if s.proc != nil {
			si.PID = s.proc.pid
		}
		sn.Slots = append(sn.Slots, si)
	}
	for _, q := range qs {
		if q.Hours {
			sn.Loads = append(sn.Loads, p.hist[q.Kind].hourWindow(sn.Now, int64(q.Back)))
		} else {
			sn.Loads = append(sn.Loads, p.hist[q.Kind].window(sn.Now, int64(q.Back)))
		}
	}
}

// Count is the number of slots in state st.
func (s *Snapshot) Count(st State) int {
	n := 0
	for _, x := range s.Slots {
		if x.State == st {
			n++
		}
	}
	return n
}

// BusyWith is the number of workers busy right now with kind k.
func (s *Snapshot) BusyWith(k Kind) int {
	n := 0
	for _, x := range s.Slots {
		if x.State == Busy && x.Current == k {
			n++
		}
	}
	return n
}

// Uptime is the whole seconds since the pool started.
func (s *Snapshot) Uptime() int64 { return s.Now.Unix() - s.Start.Unix() }
