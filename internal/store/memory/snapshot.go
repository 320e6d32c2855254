package memory

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"hash/maphash"
	"io"
	"math"
	"time"
	"unsafe"

	"sluice/internal/limiter"
)

// The snapshot format (version 1), all integers big-endian or varint:
//
//	header   "SLUICEMS" (8 bytes), version uint16, flags uint16, taken int64
//	         (Unix ns: when the copy began)
//	records  tag 1, then one rate key (below), repeated
//	end      tag 0, the number of records and the highest booking sequence
//	         number given out (uvarints)
//	trailer  CRC-32C (Castagnoli) of every byte before it, uint32
//
// A rate key is: key length (uvarint) and bytes, algorithm (1 byte: 1
// anvil, 2 exact, 3 smooth), expiry (varint Unix ns), T (varint: the anvil
// window start in Unix seconds or the smooth theoretical arrival time in
// Unix ns), then for anvil the 8 counters (uvarints), for exact the number
// of events (uvarint), the first event time (varint Unix ns) and each
// following one as the (non-negative) difference from the one before
// (uvarint), then the sequence number of its latest booking (uvarint; see
// journal.go). Exact event times with the lowest bit set are booked slots
// (reservations). Leases are never written.
const (
	snapMagic   = "SLUICEMS"
	snapVersion = 1
	// snapClean is the header flag of a snapshot written at a graceful
	// stop: nothing happened after it.
	snapClean  = 1
	headerLen  = len(snapMagic) + 2 + 2 + 8
	trailerLen = 4
	tagEnd     = 0
	tagRate    = 1
	// maxKeyLen bounds a key read back; keys are built from a few
	// attributes of a request and are far shorter.
	maxKeyLen = 1 << 20
	// maxEvents bounds one exact log read back: MaxExactN booked slots on
	// top of at most 4N (capped at MaxExactN) hits.
	maxEvents = 2 * limiter.MaxExactN
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrSnapshot is wrapped by every error about a snapshot's content: not a
// sluice snapshot, another version, truncated, corrupt.
var ErrSnapshot = errors.New("invalid store snapshot")

// SnapEntry is one rate key of a snapshot.
type SnapEntry struct {
	Key  string            // the store key
	Algo limiter.Algorithm // which state it keeps
	// Exp is when the key holds nothing worth keeping any more (Unix ns).
	Exp int64
	// T, Counts and Log are as in limiter.State; Log is the exact log's
	// event times, oldest first.
	T      int64
	Counts [limiter.MaxCounters]uint32
	Log    []int64
	// Seq is the sequence number of an exact key's latest booking.
	Seq uint64
}

// Snapshot is a decoded snapshot.
type Snapshot struct {
	// Taken is when the copy began: what happened after it is not in it.
	Taken time.Time
	// Clean says it was written at a graceful stop.
	Clean bool
	// Entries are the rate keys held.
	Entries []SnapEntry
	// Seq is the highest booking sequence number given out.
	Seq uint64

	// ref names the base file; changes are its change log's records,
	// applied after Entries; src, for a snapshot read from files, says
	// what the files hold (persist.go).
	ref     baseRef
	changes []change
	src     *snapSource
}

// snapWriter encodes a snapshot as a stream.
type snapWriter struct {
	out io.Writer     // the file: the checksum goes straight to it
	w   *bufio.Writer // the file and the checksum
	crc hash.Hash32
	n   uint64
	buf []byte
	err error
	sum uint32 // the checksum, once finished
}

func newSnapWriter(w io.Writer, taken time.Time, clean bool) *snapWriter {
	sw := &snapWriter{out: w, crc: crc32.New(crcTable)}
	sw.w = bufio.NewWriterSize(io.MultiWriter(w, sw.crc), 64<<10)
	var flags uint16
	if clean {
		flags |= snapClean
	}
	h := make([]byte, 0, headerLen)
	h = append(h, snapMagic...)
	h = binary.BigEndian.AppendUint16(h, snapVersion)
	h = binary.BigEndian.AppendUint16(h, flags)
	h = binary.BigEndian.AppendUint64(h, uint64(taken.UnixNano()))
	sw.write(h)
	return sw
}

func (sw *snapWriter) write(b []byte) {
	if sw.err == nil {
		_, sw.err = sw.w.Write(b)
	}
}

// entry appends one rate key.
func (sw *snapWriter) entry(e *SnapEntry) {
	sw.buf = appendEntry(sw.buf[:0], e)
	sw.write(sw.buf)
	sw.n++
}

// appendEntry encodes one rate key record, its tag first, onto b.
func appendEntry(b []byte, e *SnapEntry) []byte {
	b = append(b, tagRate)
	b = binary.AppendUvarint(b, uint64(len(e.Key)))
	b = append(b, e.Key...)
	b = append(b, byte(e.Algo))
	b = binary.AppendVarint(b, e.Exp)
	b = binary.AppendVarint(b, e.T)
	switch e.Algo {
	case limiter.Anvil:
		for _, c := range e.Counts {
			b = binary.AppendUvarint(b, uint64(c))
		}
	case limiter.Exact:
		b = binary.AppendUvarint(b, uint64(len(e.Log)))
		for i, t := range e.Log {
			if i == 0 {
				b = binary.AppendVarint(b, t)
			} else {
				b = binary.AppendUvarint(b, uint64(t-e.Log[i-1]))
			}
		}
		b = binary.AppendUvarint(b, e.Seq)
	}
	return b
}

// rawEntries passes already encoded records (appendEntry) to the file.
func (sw *snapWriter) rawEntries(b []byte, n int) {
	sw.write(b)
	sw.n += uint64(n)
}

// finish writes the end record and the checksum, and flushes.
func (sw *snapWriter) finish(seq uint64) error {
	sw.write(binary.AppendUvarint(binary.AppendUvarint([]byte{tagEnd}, sw.n), seq))
	if sw.err == nil {
		sw.err = sw.w.Flush()
	}
	if sw.err != nil {
		return sw.err
	}
	sw.sum = sw.crc.Sum32()
	_, err := sw.out.Write(binary.BigEndian.AppendUint32(nil, sw.sum))
	return err
}

// DecodeSnapshot parses a whole snapshot file. Any fault (foreign file,
// other version, truncation, checksum mismatch, malformed or out-of-order
// record, trailing bytes) returns an error wrapping ErrSnapshot and no
// entries: a snapshot is used whole or not at all.
func DecodeSnapshot(data []byte) (*Snapshot, error) { return decodeSnapshot(data, false) }

// The bounds of one record (appendEntry), which a snapshot's size must
// keep within for the number of keys its end record counts: a smooth
// key with an empty name takes minRecordLen bytes, an exact key of
// maxKeyLen bytes holding maxEvents events in 10-byte varints
// maxRecordLen; the end record and the trailer take at most maxTailLen.
const (
	minRecordLen = 5
	maxRecordLen = 1 + binary.MaxVarintLen64 + maxKeyLen + 1 + 2*binary.MaxVarintLen64 +
		binary.MaxVarintLen64 + maxEvents*binary.MaxVarintLen64 + binary.MaxVarintLen64
	maxTailLen = 1 + 2*binary.MaxVarintLen64 + trailerLen
)

// endRecord parses, backwards, the end record that tail (a snapshot's
// last bytes, at most maxTailLen) closes with before its trailer: it
// returns the record count and how many bytes the end record and the
// trailer take, or ok false when tail does not end that way. Backwards
// is unambiguous: in a uvarint only the last byte has its high bit clear,
// and the tag before the count is 0.
func endRecord(tail []byte) (n uint64, tailLen int, ok bool) {
	b := tail[:max(len(tail)-trailerLen, 0)]
	i := len(b)
	for range 2 { // the sequence number, then the count
		last := i - 1
		if last < 0 || b[last]&0x80 != 0 {
			return 0, 0, false
		}
		i = last
		for i > 0 && b[i-1]&0x80 != 0 {
			i--
		}
		if last+1-i > binary.MaxVarintLen64 {
			return 0, 0, false
		}
	}
	if i == 0 || b[i-1] != tagEnd {
		return 0, 0, false
	}
	n, k := binary.Uvarint(b[i:])
	if _, k2 := binary.Uvarint(b[i+max(k, 0):]); k <= 0 || k2 != len(b)-i-k {
		return 0, 0, false // a uvarint that overflows
	}
	return n, len(tail) - (i - 1), true
}

// checkCount refuses a snapshot of size bytes (at least a header and a
// trailer) unless tail, its last bytes, closes with an end record whose
// count of keys fits the records' bytes: at least minRecordLen and at
// most maxRecordLen each. It returns the count. A file cut short, a
// corrupt one, or one that says it holds fewer (or more) keys than its
// size allows is thus refused before its records are read, however
// large it is.
func checkCount(size int64, tail []byte) (uint64, error) {
	n, tailLen, ok := endRecord(tail)
	if !ok {
		return 0, fmt.Errorf("%w: no end record before the checksum (truncated or corrupt)", ErrSnapshot)
	}
	records := uint64(max(size-int64(headerLen)-int64(tailLen), 0))
	if n > records/minRecordLen {
		return 0, fmt.Errorf("%w: the end record counts %d keys, more than %d bytes of records can hold", ErrSnapshot, n, records)
	}
	if (records+maxRecordLen-1)/maxRecordLen > n {
		return 0, fmt.Errorf("%w: %d bytes of records, more than the %d keys the end record counts can take", ErrSnapshot, records, n)
	}
	return n, nil
}

// minEntryLen is about the smallest a common entry is (a smooth key of a
// few bytes): the decoder sizes its tables by it, so that a large
// snapshot is not copied over and over as they grow.
const minEntryLen = 48

// decodeSnapshot is DecodeSnapshot; with alias, the keys decoded share
// data's memory (which must then never change) instead of each being a
// copy, exact logs share one array, and a key held twice is left for
// Restore to find (it refuses such a snapshot whole).
func decodeSnapshot(data []byte, alias bool) (*Snapshot, error) {
	if len(data) < len(snapMagic) || string(data[:len(snapMagic)]) != snapMagic {
		return nil, fmt.Errorf("%w: not a sluice store snapshot (bad magic)", ErrSnapshot)
	}
	if len(data) < headerLen+2+trailerLen {
		return nil, fmt.Errorf("%w: truncated (%d bytes)", ErrSnapshot, len(data))
	}
	if v := binary.BigEndian.Uint16(data[8:]); v != snapVersion {
		return nil, fmt.Errorf("%w: format version %d; this sluice reads version %d", ErrSnapshot, v, snapVersion)
	}
	count, err := checkCount(int64(len(data)), data[max(len(data)-maxTailLen, 0):])
	if err != nil {
		return nil, err
	}
	body := data[:len(data)-trailerLen]
	got, want := crc32.Checksum(body, crcTable), binary.BigEndian.Uint32(data[len(body):])
	if got != want {
		return nil, fmt.Errorf("%w: checksum mismatch (truncated or corrupt)", ErrSnapshot)
	}
	flags := binary.BigEndian.Uint16(data[10:])
	if flags&^snapClean != 0 {
		return nil, fmt.Errorf("%w: unknown flags %#x", ErrSnapshot, flags)
	}
	taken := int64(binary.BigEndian.Uint64(data[12:]))
	snap := &Snapshot{
		Taken: timeOf(taken),
		Clean: flags&snapClean != 0,
		ref:   baseRef{taken: taken, crc: got},
	}
	d := snapDecoder{b: body[headerLen:], alias: alias}
	guess := int(min(count, uint64(len(d.b)/minEntryLen), 1<<24))
	var seen *keySet // with alias, Restore finds a key held twice
	if !alias {
		seen = newKeySet(guess)
	}
	snap.Entries = make([]SnapEntry, 0, guess)
	for {
		tag := d.byte()
		if d.err != nil {
			return nil, d.fail("record tag")
		}
		if tag == tagEnd {
			break
		}
		if tag != tagRate {
			return nil, fmt.Errorf("%w: unknown record tag %d at offset %d", ErrSnapshot, tag, d.off(body))
		}
		e, err := d.entry()
		if err != nil {
			return nil, err
		}
		if seen != nil && seen.dup(e.Key, snap.Entries) {
			return nil, fmt.Errorf("%w: key %q appears twice", ErrSnapshot, e.Key)
		}
		snap.Entries = append(snap.Entries, e)
	}
	n := d.uvarint()
	if d.err != nil {
		return nil, d.fail("record count")
	}
	if n != uint64(len(snap.Entries)) {
		return nil, fmt.Errorf("%w: %d records, the end record says %d", ErrSnapshot, len(snap.Entries), n)
	}
	snap.Seq = d.uvarint()
	if d.err != nil {
		return nil, d.fail("booking sequence number")
	}
	for i := range snap.Entries {
		if snap.Entries[i].Seq > snap.Seq {
			return nil, fmt.Errorf("%w: key %s: booking %d above the last, %d", ErrSnapshot, quoteKey(snap.Entries[i].Key), snap.Entries[i].Seq, snap.Seq)
		}
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the end record", ErrSnapshot, len(d.b))
	}
	return snap, nil
}

// keySet tells a key seen before among a snapshot's entries: by a 64-bit
// hash of each, and on a matching hash by the entry's key itself.
type keySet struct {
	seed  maphash.Seed
	first map[uint64]int32    // hash -> the entry that has it
	more  map[string]struct{} // keys whose hash another key had first
}

func newKeySet(n int) *keySet {
	return &keySet{seed: maphash.MakeSeed(), first: make(map[uint64]int32, n)}
}

// dup reports whether key is held by an entry before, and notes it as
// the key of the entry about to be appended to entries.
func (ks *keySet) dup(key string, entries []SnapEntry) bool {
	h := maphash.String(ks.seed, key)
	i, ok := ks.first[h]
	if !ok {
		ks.first[h] = int32(len(entries))
		return false
	}
	if entries[i].Key == key {
		return true
	}
	if _, ok := ks.more[key]; ok {
		return true
	}
	if ks.more == nil {
		ks.more = map[string]struct{}{}
	}
	ks.more[key] = struct{}{}
	return false
}

type snapDecoder struct {
	b   []byte
	err error
	// alias makes keys share b's memory; logs is where exact logs are
	// cut from (see decodeSnapshot).
	alias bool
	logs  []int64
}

// str returns the first n bytes of d.b as a string (n is checked).
func (d *snapDecoder) str(n uint64) string {
	if d.alias && n > 0 {
		return unsafe.String(&d.b[0], int(n))
	}
	return string(d.b[:n])
}

// logBuf returns an empty slice with room for n events, its own: cut
// from a shared array when decoding with alias.
func (d *snapDecoder) logBuf(n int) []int64 {
	if !d.alias || n > 256 {
		return make([]int64, 0, n)
	}
	if len(d.logs)+n > cap(d.logs) {
		d.logs = make([]int64, 0, 1<<16)
	}
	l := d.logs[len(d.logs) : len(d.logs) : len(d.logs)+n]
	d.logs = d.logs[:len(d.logs)+n]
	return l
}

var errShort = errors.New("short")

func (d *snapDecoder) off(body []byte) int { return len(body) - len(d.b) }

func (d *snapDecoder) fail(what string) error {
	return fmt.Errorf("%w: malformed %s: %v", ErrSnapshot, what, d.err)
}

func (d *snapDecoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.err = errShort
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *snapDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errors.New("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *snapDecoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errors.New("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// entry reads one rate key after its tag.
func (d *snapDecoder) entry() (SnapEntry, error) {
	var e SnapEntry
	kl := d.uvarint()
	if d.err == nil && (kl > maxKeyLen || kl > uint64(len(d.b))) {
		d.err = fmt.Errorf("key length %d", kl)
	}
	if d.err != nil {
		return e, d.fail("key")
	}
	e.Key = d.str(kl)
	d.b = d.b[kl:]
	e.Algo = limiter.Algorithm(d.byte())
	e.Exp = d.varint()
	e.T = d.varint()
	if d.err != nil {
		return e, d.fail("key " + quoteKey(e.Key))
	}
	if e.Algo != limiter.Anvil && e.Algo != limiter.Exact && e.Algo != limiter.Smooth {
		return e, fmt.Errorf("%w: key %s: unknown algorithm %d", ErrSnapshot, quoteKey(e.Key), e.Algo)
	}
	if e.Exp <= 0 || (e.Algo == limiter.Anvil && e.T <= 0) {
		return e, fmt.Errorf("%w: key %s: expiry %d, window %d", ErrSnapshot, quoteKey(e.Key), e.Exp, e.T)
	}
	switch e.Algo {
	case limiter.Anvil:
		for i := range e.Counts {
			v := d.uvarint()
			if v > math.MaxUint32 {
				return e, fmt.Errorf("%w: key %s: counter %d is %d", ErrSnapshot, quoteKey(e.Key), i, v)
			}
			e.Counts[i] = uint32(v)
		}
	case limiter.Exact:
		if err := d.events(&e); err != nil {
			return e, err
		}
	}
	if d.err != nil {
		return e, d.fail("key " + quoteKey(e.Key))
	}
	return e, nil
}

// events reads an exact log: sorted times, at least one byte each.
func (d *snapDecoder) events(e *SnapEntry) error {
	n := d.uvarint()
	if d.err == nil && (n == 0 || n > maxEvents || n > uint64(len(d.b))) {
		return fmt.Errorf("%w: key %s: %d events", ErrSnapshot, quoteKey(e.Key), n)
	}
	if d.err != nil {
		return d.fail("key " + quoteKey(e.Key))
	}
	e.Log = d.logBuf(int(n))
	t := d.varint()
	e.Log = append(e.Log, t)
	for i := uint64(1); i < n && d.err == nil; i++ {
		delta := d.uvarint()
		if delta > math.MaxInt64-uint64(t) || t < 0 {
			return fmt.Errorf("%w: key %s: event time overflows", ErrSnapshot, quoteKey(e.Key))
		}
		t += int64(delta)
		e.Log = append(e.Log, t)
	}
	e.Seq = d.uvarint()
	if d.err != nil {
		return d.fail("key " + quoteKey(e.Key))
	}
	if e.Log[0] <= 0 {
		return fmt.Errorf("%w: key %s: event time %d", ErrSnapshot, quoteKey(e.Key), e.Log[0])
	}
	return nil
}

// timeOf is the time of Unix ns t.
func timeOf(t int64) time.Time { return time.Unix(0, t) }

// quoteKey shows a key in an error (keys hold NUL separators).
func quoteKey(k string) string {
	if len(k) > 64 {
		k = k[:64] + "..."
	}
	return fmt.Sprintf("%q", k)
}
