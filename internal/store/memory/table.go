package memory

import (
	"fmt"
	"math"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"sluice/internal/limiter"
)

// A shard holds its keys in three flat arrays outside the Go heap
// (offheap.go), with no Go pointer per key:
//
//	recs   fixed-size records (record, 64 bytes), dense: a key removed is
//	       replaced by the last record
//	index  open addressing with linear probing: each slot is the key's
//	       32-bit hash tag and its record's position + 1 (0: empty);
//	       removal shifts the following slots back, so there are no
//	       tombstones
//	keys   the key bytes, one after another; a record holds its key's
//	       offset and length. Removed keys leave holes, reclaimed when the
//	       arena is full by copying the live keys to a new one
//
// Exact logs longer than an inline record holds, and the leases of a
// lease key, are Go slices in side tables (spill, leases) indexed from the
// record: one Go pointer per such key, not per key.

// record is one key's record.
type record struct {
	// exp is when the key holds nothing worth keeping (Unix ns); 0 means
	// never (it holds a lease without TTL).
	exp int64
	// t is the anvil window start (Unix s) or the smooth theoretical
	// arrival time (Unix ns); for an exact key, the sequence number of its
	// latest booking (see the booking journal).
	t int64
	// d holds an anvil key's 8 counters (d seen as [8]uint32), an exact key's
	// events when at most inlineEvents (nev of them), or the side-table
	// index of a spilled log (nev == spilled: d[0], and where its events
	// begin in it, d[1]) or of a lease set (d[0], and the earliest TTL
	// of its leases, d[1]: at or before it, 0 for none).
	d    [inlineEvents]int64
	koff uint32 // the key's offset in the arena
	klen uint32 // and length
	tag  uint32 // the high half of the key's hash
	kind uint8  // kindRate or kindLease
	algo limiter.Algorithm
	nev  uint8 // exact: events held inline, or spilled
	// dirty marks a rate key changed since the last snapshot write.
	dirty bool
}

const (
	inlineEvents = 4
	spilled      = math.MaxUint8
	// minRecs, minSlots and minArena are a shard's first allocation.
	minRecs  = 64
	minArena = 4096
	// maxLoad is the index's load factor ceiling, in 1/8ths.
	maxLoad = 6
	// maxArena bounds one shard's key bytes, so offsets fit a uint32.
	maxArena = 1 << 31
)

// errArenaFull is returned when a shard's keys would pass maxArena bytes:
// the store is full, whatever its key count.
var errArenaFull = fmt.Errorf("%w: a shard's keys fill %d bytes", limiter.ErrFull, maxArena)

var _ [64 - unsafe.Sizeof(record{})]struct{} // a record stays 64 bytes

type leaseRec struct {
	id  uint64
	exp int64 // Unix ns; 0: no TTL
}

type shard struct {
	mu    sync.Mutex
	idx   int
	n     int            // records in use
	recs  mapped[record] // records, n used
	slots mapped[uint64] // the index; len is a power of two
	keys  []byte         // the arena (a mapping), used bytes
	dead  int            // bytes of removed keys in keys
	// minExp is at or before the earliest expiry of any record held
	// (0: not known): until then the shard holds no key at rest.
	minExp int64
	// ndirty counts records marked dirty.
	ndirty int
	// gone holds the keys of changed records removed before a write took
	// their change (trackGone: only once the store writes snapshots), so
	// the next write can say they hold nothing.
	gone      []string
	trackGone bool
	// moves counts removals: a record index found before is still the
	// key's while moves has not changed.
	moves  uint64
	spill  [][]int64    // exact logs longer than inlineEvents
	sfree  []uint32     // free entries of spill
	leases [][]leaseRec // the leases of lease keys
	lfree  []uint32     // free entries of leases
	// leaseAt is each lease's index in its key's set, by lease ID (IDs
	// are the store's, unique): a release finds its lease at once.
	leaseAt map[uint64]uint32
	// scratch is the exact log the algorithms work on (under mu).
	scratch limiter.EventLog
	sbuf    []int64
}

// key returns record i's key, aliasing the arena: copy it to keep it
// past the lock.
func (sh *shard) key(i int) []byte {
	r := &sh.recs.s[i]
	return sh.keys[r.koff : r.koff+r.klen : r.koff+r.klen]
}

func tagOf(h uint64) uint32 { return uint32(h >> 32) }

// find returns the record of key (hash h) or -1.
func (sh *shard) find(key string, h uint64) int {
	if sh.n == 0 {
		return -1
	}
	tag := tagOf(h)
	m := uint32(len(sh.slots.s) - 1)
	for pos := tag & m; ; pos = (pos + 1) & m {
		e := sh.slots.s[pos]
		if e == 0 {
			return -1
		}
		if uint32(e>>32) == tag {
			i := int(uint32(e)) - 1
			if r := &sh.recs.s[i]; int(r.klen) == len(key) && string(sh.keys[r.koff:r.koff+r.klen]) == key {
				return i
			}
		}
	}
}

// slotOf returns the index slot pointing at record i.
func (sh *shard) slotOf(i int) uint32 {
	m := uint32(len(sh.slots.s) - 1)
	want := uint32(i + 1)
	for pos := sh.recs.s[i].tag & m; ; pos = (pos + 1) & m {
		if uint32(sh.slots.s[pos]) == want {
			return pos
		}
	}
}

// insert adds a record for key (hash h) and returns it, zeroed but for
// its key. It fails only when memory cannot be mapped, or the arena would
// pass 4 GiB.
func (sh *shard) insert(key string, h uint64, kind uint8, algo limiter.Algorithm) (int, error) {
	if err := sh.reserve(len(key)); err != nil {
		return -1, err
	}
	i := sh.n
	sh.n++
	off := len(sh.keys)
	sh.keys = append(sh.keys, key...) // within capacity: no reallocation
	sh.recs.s[i] = record{koff: uint32(off), klen: uint32(len(key)), tag: tagOf(h), kind: kind, algo: algo}
	sh.place(i)
	return i, nil
}

// place puts record i in the index.
func (sh *shard) place(i int) {
	m := uint32(len(sh.slots.s) - 1)
	tag := sh.recs.s[i].tag
	pos := tag & m
	for sh.slots.s[pos] != 0 {
		pos = (pos + 1) & m
	}
	sh.slots.s[pos] = uint64(tag)<<32 | uint64(i+1)
}

// reserve makes room for one more record with a key of klen bytes.
func (sh *shard) reserve(klen int) error {
	if sh.n == len(sh.recs.s) {
		if err := sh.recs.grow(max(2*sh.n, minRecs)); err != nil {
			return err
		}
	}
	if (sh.n+1)*8 > len(sh.slots.s)*maxLoad {
		if err := sh.rehash(max(2*len(sh.slots.s), 2*minRecs)); err != nil {
			return err
		}
	}
	if len(sh.keys)+klen > cap(sh.keys) {
		return sh.repack(klen)
	}
	return nil
}

// rehash builds an index of size slots over the records.
func (sh *shard) rehash(size int) error {
	var ns mapped[uint64]
	if err := ns.alloc(size, 0); err != nil {
		return err
	}
	sh.slots.free()
	sh.slots = ns
	for i := range sh.n {
		sh.place(i)
	}
	return nil
}

// repack drops the holes removed keys left in the arena and makes room
// for extra more bytes, and as many again as are live: in place when the
// arena is large enough, else in a larger one (grown by mremap where it
// can be). Keys that come and go (expiry, then a new key) thus cost no
// mapping call once the arena has its size.
func (sh *shard) repack(extra int) error {
	live := len(sh.keys) - sh.dead
	if need := 2 * (live + extra); need > cap(sh.keys) {
		size := max(need, minArena)
		if size > maxArena {
			size = maxArena
			if live+extra > size {
				return errArenaFull
			}
		}
		if err := sh.growArena(size); err != nil {
			return err
		}
	}
	// Copy the live keys out, then back from the start.
	tmp := make([]byte, 0, live)
	for i := range sh.n {
		r := &sh.recs.s[i]
		off := len(tmp)
		tmp = append(tmp, sh.keys[r.koff:r.koff+r.klen]...)
		r.koff = uint32(off)
	}
	sh.keys = sh.keys[:copy(sh.keys[:cap(sh.keys)], tmp)]
	sh.dead = 0
	return nil
}

// growArena makes the arena hold size bytes, keeping its content.
func (sh *shard) growArena(size int) error {
	if cap(sh.keys) > 0 {
		if nb, err := unix.Mremap(sh.keys[:cap(sh.keys)], size, unix.MREMAP_MAYMOVE); err == nil {
			sh.keys = nb[:len(sh.keys)]
			return nil
		}
	}
	nb, err := mapBytes(size)
	if err != nil {
		return err
	}
	n := copy(nb, sh.keys)
	unmapBytes(sh.keys)
	sh.keys = nb[:n]
	return nil
}

// remove drops record i: its slot goes, the slots after it in its run
// shift back, and the last record moves into its place.
func (sh *shard) remove(i int) {
	r := &sh.recs.s[i]
	sh.moves++
	sh.dead += int(r.klen)
	if r.dirty {
		sh.ndirty--
		if sh.trackGone && r.kind == kindRate {
			sh.gone = append(sh.gone, string(sh.key(i)))
		}
	}
	sh.freeSide(r)
	m := uint32(len(sh.slots.s) - 1)
	hole := sh.slotOf(i)
	for pos := (hole + 1) & m; ; pos = (pos + 1) & m {
		e := sh.slots.s[pos]
		if e == 0 {
			break
		}
		// Move e back into the hole unless its home lies in (hole, pos].
		home := uint32(e>>32) & m
		if (pos-home)&m >= (pos-hole)&m {
			sh.slots.s[hole] = e
			hole = pos
		}
	}
	sh.slots.s[hole] = 0
	last := sh.n - 1
	if i != last {
		sh.slots.s[sh.slotOf(last)] = uint64(sh.recs.s[last].tag)<<32 | uint64(i+1)
		sh.recs.s[i] = sh.recs.s[last]
	}
	sh.recs.s[last] = record{}
	sh.n--
	if sh.n == 0 {
		sh.keys, sh.dead = sh.keys[:0], 0
	}
}

// freeSide returns a record's side-table entries.
func (sh *shard) freeSide(r *record) {
	switch {
	case r.kind == kindLease:
		for _, l := range sh.leases[r.d[0]] {
			delete(sh.leaseAt, l.id)
		}
		if ls := sh.leases[r.d[0]]; cap(ls) <= keptLeaseCap && len(sh.lfree) < keptLeaseSets {
			sh.leases[r.d[0]] = ls[:0] // reused by the next newLeaseSet
		} else {
			sh.leases[r.d[0]] = nil
		}
		sh.lfree = append(sh.lfree, uint32(r.d[0]))
	case r.algo == limiter.Exact && r.nev == spilled:
		sh.spill[r.d[0]] = nil
		sh.sfree = append(sh.sfree, uint32(r.d[0]))
		r.nev = 0
	}
}

// setExp sets record i's expiry, keeping minExp at or before it.
func (sh *shard) setExp(i int, exp int64) {
	sh.recs.s[i].exp = exp
	if exp != 0 && (sh.minExp == 0 || exp < sh.minExp) {
		sh.minExp = exp
	}
}

// markDirty notes a change of record i for the next snapshot write.
func (sh *shard) markDirty(i int) {
	if r := &sh.recs.s[i]; !r.dirty {
		r.dirty = true
		sh.ndirty++
	}
}

// release frees every mapping and side table of the shard.
func (sh *shard) release() {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.recs.free()
	sh.slots.free()
	unmapBytes(sh.keys)
	sh.keys = nil
	sh.n, sh.dead, sh.ndirty = 0, 0, 0
	sh.spill, sh.sfree, sh.leases, sh.lfree, sh.leaseAt = nil, nil, nil, nil, nil
}

// inUse is the bytes of the shard's mappings its keys use: records, the
// whole index (it is touched throughout) and the arena up to its end.
func (sh *shard) inUse() int {
	return sh.n*int(unsafe.Sizeof(record{})) + len(sh.slots.s)*8 + len(sh.keys)
}

// InUse returns the bytes of mappings the store's keys use (records,
// index, key bytes; not the side tables of long exact logs and leases,
// which are on the Go heap).
func (s *Store) InUse() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.inUse()
		sh.mu.Unlock()
	}
	return n
}
