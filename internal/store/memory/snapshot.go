package memory

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"strings"
	"time"
	"unsafe"

	"sluice/internal/limiter"
)

// The store file (format version 2), all integers big-endian or varint:
//
//	header  "SLUICEMS" (8 bytes), version uint16, keys uint32 (the
//	        base's key count: only a hint the reader sizes its tables by)
//	records each a body length (uint32), the body (a type byte, then
//	        its payload) and the body's CRC-32C (Castagnoli, uint32)
//
// The file is a base and a log after it. The base is every rate key held
// (key records) closed by a mark flagged base that counts them; it is
// written whole to a temporary file and renamed into place. The log is
// appended to it: each periodic write appends the keys changed since the
// write before (key records, or del for a key that holds nothing any
// more) closed by a mark; each throttle slot is appended as a book
// record as it is booked, before the sender hears its time.
//
// Payloads:
//
//	key   key length (uvarint) and bytes, algorithm (1 byte: 1 anvil,
//	      2 exact, 3 smooth), expiry (varint Unix ns), T (varint: the
//	      anvil window start in Unix seconds or the smooth theoretical
//	      arrival time in Unix ns), then for anvil the 8 counters
//	      (uvarints), for exact the number of events (uvarint), the first
//	      event time (varint Unix ns) and each following one as the
//	      difference from the one before (uvarint), then the sequence
//	      number of its latest booking (uvarint). Exact event times with
//	      the lowest bit set are booked slots.
//	del   the key's bytes
//	book  sequence number (uvarint), key length (uvarint) and key, slot
//	      time (varint Unix ns, lowest bit set), events (uvarint), expiry
//	      (varint Unix ns)
//	mark  flags (1 byte: 1 clean, written at a graceful stop; 2 base),
//	      taken (varint Unix ns: when the copy began), the highest booking
//	      sequence number given out (uvarint), the highest one whose
//	      booking the records before the mark hold (uvarint: read before
//	      the copy began), the key and del records of the write (uvarint)
//
// Leases are never written.
const (
	snapMagic   = "SLUICEMS"
	snapVersion = 2
	headerLen   = len(snapMagic) + 2 + 4
	recKey      = 1
	recDel      = 2
	recBook     = 3
	recMark     = 4
	markClean   = 1
	markBase    = 2
	// The bounds of what is read back: a key (built from a few attributes
	// of a request, far shorter); an exact log (MaxExactN booked slots on
	// top of at most 4N, capped at MaxExactN, hits); a record's body (an
	// exact key of maxKeyLen bytes and maxEvents events in 10-byte
	// varints); frameLen is what a record takes besides its body.
	maxKeyLen = 1 << 20
	maxEvents = 2 * limiter.MaxExactN
	maxBody   = 1 + 5*binary.MaxVarintLen64 + maxKeyLen + 1 + maxEvents*binary.MaxVarintLen64
	frameLen  = 8
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrSnapshot is wrapped by every error about a store file's content:
// not a sluice store file, another version, truncated, corrupt.
var ErrSnapshot = errors.New("invalid store snapshot")

// SnapEntry is one rate key of a store file.
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

// booking is one book record: a throttle slot given out.
type booking struct {
	seq     uint64
	key     string
	at, exp int64 // Unix ns; at has its lowest bit set
	n       int64
}

// mark is one mark record: the end of a write.
type mark struct {
	flags            byte
	taken            int64
	seq, from, count uint64
}

// appendHeader encodes a file's header (keys: the base's key count).
func appendHeader(b []byte, keys uint32) []byte {
	b = append(b, snapMagic...)
	b = binary.BigEndian.AppendUint16(b, snapVersion)
	return binary.BigEndian.AppendUint32(b, keys)
}

// openRecord starts a record of type typ on b; closeRecord, given what
// openRecord returned, frames the payload appended since.
func openRecord(b []byte, typ byte) ([]byte, int) {
	return append(b, 0, 0, 0, 0, typ), len(b)
}

func closeRecord(b []byte, start int) []byte {
	body := b[start+4:]
	binary.BigEndian.PutUint32(b[start:], uint32(len(body)))
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(body, crcTable))
}

// appendKey encodes a key record.
func appendKey(b []byte, e *SnapEntry) []byte {
	b, start := openRecord(b, recKey)
	return closeRecord(appendEntry(b, e), start)
}

// appendDel encodes a del record.
func appendDel(b, key []byte) []byte {
	b, start := openRecord(b, recDel)
	return closeRecord(append(b, key...), start)
}

// appendBook encodes a book record.
func appendBook(b []byte, k booking) []byte {
	b, start := openRecord(b, recBook)
	return closeRecord(appendBooking(b, k), start)
}

// appendMark encodes a mark record.
func appendMark(b []byte, m mark) []byte {
	b, start := openRecord(b, recMark)
	b = binary.AppendVarint(append(b, m.flags), m.taken)
	b = binary.AppendUvarint(binary.AppendUvarint(b, m.seq), m.from)
	return closeRecord(binary.AppendUvarint(b, m.count), start)
}

// appendEntry encodes a key's payload.
func appendEntry(b []byte, e *SnapEntry) []byte {
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

// appendBooking encodes a booking's payload.
func appendBooking(b []byte, k booking) []byte {
	b = binary.AppendUvarint(b, k.seq)
	b = binary.AppendUvarint(b, uint64(len(k.key)))
	b = append(b, k.key...)
	b = binary.AppendVarint(b, k.at)
	b = binary.AppendUvarint(b, uint64(k.n))
	return binary.AppendVarint(b, k.exp)
}

// recordReader reads records from a file of size bytes through a window
// of its bytes: a record is read only once its length fits what is left
// of the file (so a hostile file costs a window, or one record of at most
// maxBody bytes).
type recordReader struct {
	r         io.ReaderAt
	size, off int64  // the file's size; the next record's offset
	win, buf  []byte // file bytes from woff; the window's memory
	woff      int64
}

const window = 256 << 10

// bytesAt returns n bytes at off, refilling the window (grown for a
// record larger than it).
func (rr *recordReader) bytesAt(off int64, n int) ([]byte, error) {
	if off < rr.woff || off+int64(n) > rr.woff+int64(len(rr.win)) {
		if len(rr.buf) < max(n, window) {
			rr.buf = make([]byte, max(n, window))
		}
		k, err := rr.r.ReadAt(rr.buf[:min(int64(len(rr.buf)), rr.size-off)], off)
		if k < n {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		rr.win, rr.woff = rr.buf[:k], off
	}
	return rr.win[off-rr.woff : off-rr.woff+int64(n)], nil
}

// next returns the next record's type and payload, which stays valid
// until the following call; io.EOF at the end of the file.
func (rr *recordReader) next() (byte, []byte, error) {
	left := rr.size - rr.off
	if left == 0 {
		return 0, nil, io.EOF
	}
	if left < frameLen+1 {
		return 0, nil, fmt.Errorf("%d bytes at offset %d: a record cut short", left, rr.off)
	}
	h, err := rr.bytesAt(rr.off, 4)
	if err != nil {
		return 0, nil, err
	}
	n := int64(binary.BigEndian.Uint32(h))
	if n < 1 || n > maxBody || n > left-frameLen {
		return 0, nil, fmt.Errorf("record length %d at offset %d (%d bytes left)", n, rr.off, left)
	}
	rec, err := rr.bytesAt(rr.off, int(n+frameLen))
	if err != nil {
		return 0, nil, err
	}
	body := rec[4 : 4+n]
	if crc32.Checksum(body, crcTable) != binary.BigEndian.Uint32(rec[4+n:]) {
		return 0, nil, fmt.Errorf("record at offset %d: checksum mismatch", rr.off)
	}
	rr.off += n + frameLen
	return body[0], body[1:], nil
}

// snapDecoder decodes payloads.
type snapDecoder struct {
	b   []byte
	err error
	// alias makes keys share b's memory; logs is where exact logs are
	// cut from.
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
// from a shared array.
func (d *snapDecoder) logBuf(n int) []int64 {
	if n > 256 {
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

// key reads a key's length and bytes.
func (d *snapDecoder) key() string {
	kl := d.uvarint()
	if d.err == nil && (kl > maxKeyLen || kl > uint64(len(d.b))) {
		d.err = fmt.Errorf("key length %d", kl)
	}
	if d.err != nil {
		return ""
	}
	k := d.str(kl)
	d.b = d.b[kl:]
	return k
}

// end fails a payload with bytes left over.
func (d *snapDecoder) end(what string) error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d bytes after it", len(d.b))
	}
	if d.err != nil {
		return d.fail(what)
	}
	return nil
}

// keyRecord reads a key record's payload, and nothing after it.
func (d *snapDecoder) keyRecord() (SnapEntry, error) {
	e, err := d.entry()
	if err == nil {
		err = d.end("key")
	}
	return e, err
}

// entry reads a key's payload.
func (d *snapDecoder) entry() (SnapEntry, error) {
	var e SnapEntry
	e.Key = d.key()
	if d.err != nil {
		return e, d.fail("key")
	}
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

// booking reads a booking's payload (its key a copy).
func (d *snapDecoder) booking() (booking, error) {
	var k booking
	k.seq = d.uvarint()
	k.key = strings.Clone(d.key())
	k.at = d.varint()
	n := d.uvarint()
	k.exp = d.varint()
	if err := d.end("booking"); err != nil {
		return k, err
	}
	if k.seq == 0 || k.at <= 0 || k.at&1 != 1 || n == 0 || n > maxEvents || k.exp <= k.at&^1 {
		return k, fmt.Errorf("%w: bad booking (seq %d, at %d, n %d, exp %d)", ErrSnapshot, k.seq, k.at, n, k.exp)
	}
	k.n = int64(n)
	return k, nil
}

// mark reads a mark's payload.
func (d *snapDecoder) mark() (mark, error) {
	var m mark
	m.flags, m.taken = d.byte(), d.varint()
	m.seq, m.from, m.count = d.uvarint(), d.uvarint(), d.uvarint()
	if err := d.end("mark"); err != nil {
		return m, err
	}
	if m.flags&^(markClean|markBase) != 0 || m.from > m.seq {
		return m, fmt.Errorf("%w: bad mark (flags %#x, bookings %d of %d)", ErrSnapshot, m.flags, m.from, m.seq)
	}
	return m, nil
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
