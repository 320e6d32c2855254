package memory

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"syscall"
	"time"

	"sluice/internal/safefs"
)

// The change log: what changed since the snapshot (the base) was
// written, appended at every write, so that a write costs what changed
// and an idle store writes nothing. It lives next to the base, at
// path+".changes", and names its base by the base's time and checksum: a
// log left over from before the base it sits next to (a crash between
// writing a new base and starting its log) is ignored.
//
// File: "SLUICEMC" (8 bytes), version uint16, the base's taken time
// (int64 Unix ns) and CRC-32C (uint32), then segments. A segment is a
// body length (uint32), the body and its CRC-32C (uint32). Body: flags
// (1 byte; 1 = clean: written at a graceful stop), taken (int64 Unix ns),
// records, and the end: tag 0, the number of records and the highest
// booking sequence number given out (uvarints). A record is a rate
// key as in the base (tag 1, snapshot.go), or tag 2, a key length
// (uvarint) and key: a key that holds nothing any more (an undo or a
// cancelled booking emptied it). Later records of a key replace earlier
// ones and the base's. A segment cut short or corrupt ends the log: the
// segments before it are used, and the snapshot counts as not clean.
const (
	changesMagic     = "SLUICEMC"
	changesVersion   = 1
	changesHeaderLen = len(changesMagic) + 2 + 8 + 4
	changesSuffix    = ".changes"
	tagDel           = 2
	// segChunk is how much of a segment a write holds before passing it
	// to the file.
	segChunk = 256 << 10
	// maxSegment bounds one segment's body (its length is a uint32).
	maxSegment = 1<<32 - 1
)

// minCompact is the log size below which it is never compacted into a
// new base; above it, once it passes the base's size (a variable for the
// tests).
var minCompact int64 = 4 << 20

// baseRef names a base: when it was taken and its checksum.
type baseRef struct {
	taken int64
	crc   uint32
}

func changesHeader(ref baseRef) []byte {
	h := append([]byte(changesMagic), 0, 0)
	binary.BigEndian.PutUint16(h[len(changesMagic):], changesVersion)
	h = binary.BigEndian.AppendUint64(h, uint64(ref.taken))
	return binary.BigEndian.AppendUint32(h, ref.crc)
}

// segment builds one segment: the caller appends records to body after
// begin and seals it with seal.
type segment struct {
	b []byte
	n int
}

func (sg *segment) begin(taken int64, clean bool) {
	flags := byte(0)
	if clean {
		flags = snapClean
	}
	sg.b = append(sg.b[:0], flags)
	sg.b = binary.BigEndian.AppendUint64(sg.b, uint64(taken))
	sg.n = 0
}

// del appends a record saying key holds nothing.
func (sg *segment) del(key []byte) {
	sg.b = append(sg.b, tagDel)
	sg.b = binary.AppendUvarint(sg.b, uint64(len(key)))
	sg.b = append(sg.b, key...)
	sg.n++
}

// end appends the end record: the count and seq, the highest booking
// sequence number given out (read after the copy).
func (sg *segment) end(seq uint64) {
	sg.b = binary.AppendUvarint(binary.AppendUvarint(append(sg.b, tagEnd), uint64(sg.n)), seq)
}

// segWriter streams one segment to a change log: the length first as a
// placeholder, the body in chunks as the shards are encoded, then the
// length and the checksum. A crash in the middle leaves a segment whose
// length or checksum does not hold: a torn tail, which the reader drops.
type segWriter struct {
	f     *os.File
	tmp   string // the new log's temporary name ("": appending to p.logf)
	start int64  // where the segment begins: its length field
	body  int64  // body bytes passed to the file
	crc   hash.Hash32
	sg    segment
	err   error
}

// openSegment starts a segment: on the open change log, or, for the first
// change of a process, on a new log (a temporary file holding the header
// and the segments a restore read).
func (s *Store) openSegment(path string, now time.Time, clean bool) (*segWriter, error) {
	p := &s.persist
	sw := &segWriter{f: p.logf, start: p.logLen, crc: crc32.New(crcTable), sg: segment{b: p.sg.b}}
	if sw.f == nil {
		head := append(changesHeader(p.ref), p.carry...)
		f, tmp, err := createNew(path + changesSuffix + ".tmp")
		if err == nil {
			_, err = f.Write(head)
		}
		if err != nil {
			if f != nil {
				f.Close()
				os.Remove(tmp)
			}
			return nil, fmt.Errorf("store snapshot: change log: %w", err)
		}
		sw.f, sw.tmp, sw.start = f, tmp, int64(len(head))
	}
	sw.sg.begin(now.UnixNano(), clean)
	return sw, nil
}

// size is what the log would hold with the segment so far.
func (sw *segWriter) size() int64 { return sw.start + 8 + sw.body + int64(len(sw.sg.b)) }

// flush passes the chunk held to the file.
func (sw *segWriter) flush() {
	if sw.err == nil && len(sw.sg.b) > 0 {
		_, sw.err = sw.f.WriteAt(sw.sg.b, sw.start+4+sw.body)
		sw.crc.Write(sw.sg.b)
		sw.body += int64(len(sw.sg.b))
	}
	sw.sg.b = sw.sg.b[:0]
}

// finish ends the segment, writes its length and checksum, syncs, and
// returns its size.
func (sw *segWriter) finish(seq uint64) (int64, error) {
	sw.sg.end(seq)
	sw.flush()
	if sw.err == nil && sw.body > maxSegment {
		sw.err = fmt.Errorf("a segment of %d bytes", sw.body)
	}
	if sw.err == nil {
		_, sw.err = sw.f.WriteAt(binary.BigEndian.AppendUint32(nil, uint32(sw.body)), sw.start)
	}
	if sw.err == nil {
		_, sw.err = sw.f.WriteAt(binary.BigEndian.AppendUint32(nil, sw.crc.Sum32()), sw.start+4+sw.body)
	}
	if sw.err == nil {
		sw.err = sw.f.Sync()
	}
	sw.keepBuf()
	return 8 + sw.body, sw.err
}

// abort drops the segment: a new log is removed, the open one cut back
// to where the segment began.
func (sw *segWriter) abort() {
	sw.keepBuf()
	if sw.tmp != "" {
		sw.f.Close()
		os.Remove(sw.tmp)
		return
	}
	if sw.body > 0 || sw.err != nil {
		sw.f.Truncate(sw.start) // a torn segment would hide later ones
	}
}

// keepBuf leaves the chunk buffer for the next write, unless a large
// change made it large.
func (sw *segWriter) keepBuf() {
	sw.sg.b = sw.sg.b[:0]
	if cap(sw.sg.b) > 2*segChunk {
		sw.sg.b = nil
	}
}

// createNew creates path anew for writing: whatever a crash (or anyone)
// left at the name is removed, not written through (O_EXCL, O_NOFOLLOW).
func createNew(path string) (*os.File, string, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, "", err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, "", err
	}
	return f, path, nil
}

// change is one record of the log.
type change struct {
	del bool
	e   SnapEntry // for a deletion only Key
}

// changes is what a log adds to its base.
type changes struct {
	list  []change
	taken int64  // the last segment's
	clean bool   // the last segment's flag, and nothing after it
	seq   uint64 // the highest booking sequence number
	segs  int
	raw   []byte // the valid segments, to carry into the next log
}

// decodeChanges parses a log of base ref. A log of another base returns
// nil and no error; a foreign file or version an error wrapping
// ErrSnapshot; a bad segment ends the reading (clean is then false).
func decodeChanges(data []byte, ref baseRef) (*changes, error) {
	if len(data) < changesHeaderLen || string(data[:len(changesMagic)]) != changesMagic {
		return nil, fmt.Errorf("%w: change log: not a sluice change log (bad magic)", ErrSnapshot)
	}
	if v := binary.BigEndian.Uint16(data[len(changesMagic):]); v != changesVersion {
		return nil, fmt.Errorf("%w: change log: format version %d; this sluice reads version %d", ErrSnapshot, v, changesVersion)
	}
	if !bytes.Equal(data[:changesHeaderLen], changesHeader(ref)) {
		return nil, nil // the log of an older base
	}
	c := &changes{}
	r := data[changesHeaderLen:]
	for len(r) > 0 {
		n, err := c.segment(r)
		if err != nil {
			c.clean = false
			break
		}
		c.raw = data[changesHeaderLen : len(data)-len(r)+n]
		r = r[n:]
	}
	return c, nil
}

// segment decodes the segment at the start of r and returns its length.
// Its records are added only when the whole segment is valid.
func (c *changes) segment(r []byte) (int, error) {
	if len(r) < 4 {
		return 0, io.ErrUnexpectedEOF
	}
	l, n := uint64(binary.BigEndian.Uint32(r)), 4
	if l > uint64(len(r)-n) || uint64(len(r)-n)-l < 4 || l < 10 {
		return 0, io.ErrUnexpectedEOF
	}
	body := r[n : n+int(l)]
	if crc32.Checksum(body, crcTable) != binary.BigEndian.Uint32(r[n+int(l):]) {
		return 0, errors.New("checksum mismatch")
	}
	flags, taken := body[0], int64(binary.BigEndian.Uint64(body[1:]))
	d := snapDecoder{b: body[9:]}
	start := len(c.list)
	for d.err == nil {
		tag := d.byte()
		switch {
		case d.err != nil:
		case tag == tagEnd:
			cnt, seq := d.uvarint(), d.uvarint()
			if d.err == nil && (cnt != uint64(len(c.list)-start) || len(d.b) != 0) {
				d.err = errors.New("bad end record")
			}
			if d.err == nil && flags&^snapClean == 0 {
				c.taken, c.clean, c.seq = taken, flags&snapClean != 0, max(c.seq, seq)
				c.segs++
				return n + int(l) + 4, nil
			}
		case tag == tagRate:
			e, err := d.entry()
			if err != nil {
				d.err = err
			}
			c.list = append(c.list, change{e: e})
		case tag == tagDel:
			kl := d.uvarint()
			if d.err == nil && (kl > maxKeyLen || kl > uint64(len(d.b))) {
				d.err = errShort
			}
			if d.err == nil {
				c.list = append(c.list, change{del: true, e: SnapEntry{Key: string(d.b[:kl])}})
				d.b = d.b[kl:]
			}
		default:
			d.err = fmt.Errorf("unknown record tag %d", tag)
		}
	}
	c.list = c.list[:start]
	if d.err == nil {
		d.err = errors.New("bad segment")
	}
	return 0, d.err
}

// readChanges reads the log next to the base at path, if there is one,
// at most limit bytes, opened as the base is (safefs).
func readChanges(path string, limit int64, ref baseRef) (*changes, error) {
	f, err := safefs.OpenState(path+changesSuffix, limit)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store snapshot: change log: %w", err)
	}
	defer f.Close()
	data, err := readChecked(f, limit, len(changesMagic), func(head []byte) error {
		if len(head) == len(changesMagic) && string(head) != changesMagic {
			return fmt.Errorf("%w: change log: not a sluice change log (bad magic)", ErrSnapshot)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store snapshot %s: %w", path+changesSuffix, err)
	}
	c, err := decodeChanges(data, ref)
	if err != nil {
		return nil, fmt.Errorf("store snapshot %s: %w", path+changesSuffix, err)
	}
	return c, nil
}

// apply makes the log's records part of snap: the entries of the keys
// changed are replaced (or dropped), in the order of the log.
func (c *changes) apply(snap *Snapshot) {
	if c == nil || c.segs == 0 {
		return
	}
	snap.changes = c.list
	snap.Taken = timeOf(c.taken)
	snap.Clean = c.clean
	snap.Seq = max(snap.Seq, c.seq)
}

// writeChangesFile starts a new log at path (atomically: a new file,
// renamed over the old one) holding data, and returns it open for
// appending.
func writeChangesFile(path string, data []byte) (*os.File, error) {
	f, err := writeJournalFile(path, data)
	if err != nil {
		return nil, fmt.Errorf("change log: %w", err)
	}
	return f, nil
}

// closeChanges closes the change log (Close calls it); a later write
// starts a new base.
func (s *Store) closeChanges() {
	p := &s.persist
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.logf != nil {
		p.logf.Close()
		p.logf, p.full = nil, true
	}
}

// encodeDirty appends the shard's changed keys to sg, under its lock,
// and marks them clean: a key holding something as its entry, one that
// does not (or was removed since it changed) as a deletion.
func (sh *shard) encodeDirty(sg *segment, nowNs int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.trackGone = true
	for _, k := range sh.gone {
		sg.del([]byte(k)) // before the keys held: a key made again wins
	}
	clear(sh.gone)
	sh.gone = sh.gone[:0]
	if sh.ndirty == 0 {
		return
	}
	for i := range sh.n {
		r := &sh.recs.s[i]
		if !r.dirty {
			continue
		}
		r.dirty = false
		if r.kind != kindRate {
			continue
		}
		if sh.live(i, nowNs) {
			e := sh.snapEntry(i)
			sg.b = appendEntry(sg.b, &e)
			sg.n++
		} else {
			sg.del(sh.key(i))
		}
	}
	sh.ndirty = 0
}
