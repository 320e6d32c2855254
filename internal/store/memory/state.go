package memory

import (
	"unsafe"

	"sluice/internal/limiter"
)

// The algorithms (limiter.State) work on a State value; load fills one
// from a record and save writes it back. An exact log is lent to them as
// the shard's scratch log: over a copy of the inline events, or over the
// spilled slice itself, so every exact operation must be saved (a trim
// may shift a spilled slice in place).

var _ [unsafe.Sizeof(record{}.d) - unsafe.Sizeof([limiter.MaxCounters]uint32{})]struct{} // the counters fit d

// load fills st with record i's state.
func (sh *shard) load(i int, st *limiter.State) {
	r := &sh.recs.s[i]
	switch r.algo {
	case limiter.Anvil:
		st.T = r.t
		st.Counts = *r.counts()
	case limiter.Smooth:
		st.T = r.t
	case limiter.Exact:
		if r.nev == spilled {
			sh.scratch.Lend(sh.spill[r.d[0]], int(r.d[1]))
		} else {
			sh.sbuf = append(sh.sbuf[:0], r.d[:r.nev]...)
			sh.scratch.Lend(sh.sbuf, 0)
		}
		st.Log = &sh.scratch
	}
}

// counts is an anvil record's counters: d seen as eight uint32s.
func (r *record) counts() *[limiter.MaxCounters]uint32 {
	return (*[limiter.MaxCounters]uint32)(unsafe.Pointer(&r.d))
}

// loadZero fills st with the state of a key not held.
func (sh *shard) loadZero(st *limiter.State, algo limiter.Algorithm) {
	if algo == limiter.Exact {
		sh.scratch.Lend(sh.sbuf[:0], 0)
		st.Log = &sh.scratch
	}
}

// save writes st back to record i.
func (sh *shard) save(i int, st *limiter.State) {
	r := &sh.recs.s[i]
	switch r.algo {
	case limiter.Anvil:
		r.t = st.T
		*r.counts() = st.Counts
	case limiter.Smooth:
		r.t = st.T
	case limiter.Exact:
		buf, head := st.Log.Storage()
		sh.keepLog(r, buf, head)
	}
}

// keepLog stores an exact log's events, buf[head:], in r: inline when
// they fit, else in the spill table (with head: the room before it is
// reused when the log compacts itself).
func (sh *shard) keepLog(r *record, buf []int64, head int) {
	if r.nev == spilled && len(buf)-head > inlineEvents {
		sh.spill[r.d[0]], r.d[1] = buf, int64(head) // the slice lent, or its growth
		return
	}
	times := buf[head:]
	if len(times) <= inlineEvents {
		var in [inlineEvents]int64
		copy(in[:], times) // times may alias the spilled slice freed below
		if r.nev == spilled {
			sh.spill[r.d[0]] = nil
			sh.sfree = append(sh.sfree, uint32(r.d[0]))
		}
		r.d, r.nev = in, uint8(len(times))
		return
	}
	if r.nev == spilled {
		sh.spill[r.d[0]], r.d[1] = buf, int64(head) // the slice lent, or its growth
		return
	}
	// times aliases the scratch buffer: the log gets storage of its own.
	own := make([]int64, len(times), 2*len(times))
	copy(own, times)
	var k uint32
	if n := len(sh.sfree); n > 0 {
		k = sh.sfree[n-1]
		sh.sfree = sh.sfree[:n-1]
		sh.spill[k] = own
	} else {
		k = uint32(len(sh.spill))
		sh.spill = append(sh.spill, own)
	}
	r.d[0], r.d[1], r.nev = int64(k), 0, spilled
}

// events returns record i's exact events, aliasing the record or its
// spilled slice.
func (sh *shard) events(i int) []int64 {
	r := &sh.recs.s[i]
	if r.nev == spilled {
		return sh.spill[r.d[0]][r.d[1]:]
	}
	return r.d[:r.nev]
}

// leaseSet returns the leases of lease record i.
func (sh *shard) leaseSet(i int) []leaseRec { return sh.leases[sh.recs.s[i].d[0]] }

// setLeases replaces the leases of lease record i.
func (sh *shard) setLeases(i int, l []leaseRec) { sh.leases[sh.recs.s[i].d[0]] = l }

// A freed lease set keeps its array for the next key when it is small
// (at most keptLeaseCap leases) and among the last keptLeaseSets freed:
// a class slot taken and given back once a session, as at one session at
// a time, allocates nothing, and the free list holds no large arrays.
const (
	keptLeaseCap  = 4
	keptLeaseSets = 64
)

// newLeaseSet gives lease record i an empty lease set.
func (sh *shard) newLeaseSet(i int) {
	var k uint32
	if n := len(sh.lfree); n > 0 {
		k = sh.lfree[n-1]
		sh.lfree = sh.lfree[:n-1]
	} else {
		k = uint32(len(sh.leases))
		sh.leases = append(sh.leases, nil)
	}
	if cap(sh.leases[k]) == 0 {
		sh.leases[k] = make([]leaseRec, 0, 2)
	}
	sh.recs.s[i].d[0], sh.recs.s[i].d[1] = int64(k), 0
	if sh.leaseAt == nil {
		sh.leaseAt = make(map[uint64]uint32)
	}
}
