package memory

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"sluice/internal/limiter"
	"sluice/internal/safefs"
)

// The booking journal: every reservation (a throttle send slot) is
// appended to it as it is booked, before the sender is told its time, so
// a daemon killed between two snapshots still knows every slot it gave
// out. A write to the page cache survives the process (kill -9, OOM); a
// power loss can cost the last bookings, but takes the senders on the
// same host with it.
//
// File: "SLUICEBJ" (8 bytes), version uint16, then records, each a body
// length (uvarint), the body and its CRC-32C (uint32 big-endian). Body:
// sequence number (uvarint), key length (uvarint) and key, slot time
// (varint Unix ns, lowest bit set), events (uvarint), expiry (varint Unix
// ns). Sequence numbers rise across restarts; a snapshot records, per
// exact key, the sequence number of its latest booking, so a record the
// snapshot already holds is not applied twice.
const (
	journalMagic     = "SLUICEBJ"
	journalVersion   = 1
	journalHeaderLen = len(journalMagic) + 2
	maxJournalRecord = maxKeyLen + 64
)

// Booking is one journal record.
type Booking struct {
	Seq uint64 // its sequence number, from 1, increasing
	Key string // the exact key booked
	At  int64  // Unix ns, lowest bit set (a reservation)
	N   int64  // the events booked
	Exp int64  // Unix ns: when the key's window holding it ends
}

type journal struct {
	mu      sync.Mutex
	path    string
	f       *os.File
	off     int64 // end of the file
	failing bool  // the last append failed (reported once)
	buf     []byte
	onErr   func(error)
}

func journalHeader() []byte {
	return binary.BigEndian.AppendUint16([]byte(journalMagic), journalVersion)
}

// appendBooking encodes b onto buf.
func appendBooking(buf []byte, b Booking) []byte {
	body := binary.AppendUvarint(nil, b.Seq)
	body = binary.AppendUvarint(body, uint64(len(b.Key)))
	body = append(body, b.Key...)
	body = binary.AppendVarint(body, b.At)
	body = binary.AppendUvarint(body, uint64(b.N))
	body = binary.AppendVarint(body, b.Exp)
	buf = binary.AppendUvarint(buf, uint64(len(body)))
	buf = append(buf, body...)
	return binary.BigEndian.AppendUint32(buf, crc32.Checksum(body, crcTable))
}

// append writes one record with one write call.
func (j *journal) append(b Booking) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.buf = appendBooking(j.buf[:0], b)
	n, err := j.f.WriteAt(j.buf, j.off)
	j.off += int64(n)
	if err != nil && n > 0 {
		// A torn record would hide every later one: cut it off.
		j.off -= int64(n)
		j.f.Truncate(j.off)
	}
	if (err != nil) != j.failing {
		j.failing = err != nil
		if err != nil && j.onErr != nil {
			j.onErr(fmt.Errorf("booking journal %s: %w", j.path, err))
		}
	}
}

// offset returns the end of the journal.
func (j *journal) offset() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.off
}

// compact drops the records before from, which a snapshot just written
// holds: they were appended, under their key's lock, before the snapshot
// began copying. The rest (booked while it copied) is kept.
func (j *journal) compact(from int64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	hdr := int64(journalHeaderLen)
	if from <= hdr {
		return nil
	}
	if from >= j.off {
		if err := j.f.Truncate(hdr); err != nil {
			return fmt.Errorf("booking journal %s: %w", j.path, err)
		}
		j.off = hdr
		return nil
	}
	rest := make([]byte, j.off-from)
	if _, err := j.f.ReadAt(rest, from); err != nil {
		return fmt.Errorf("booking journal %s: %w", j.path, err)
	}
	f, err := writeJournalFile(j.path, append(journalHeader(), rest...))
	if err != nil {
		return err
	}
	j.f.Close()
	j.f, j.off = f, hdr+int64(len(rest))
	return nil
}

// writeJournalFile replaces path with data atomically and returns it open
// for appending.
func writeJournalFile(path string, data []byte) (*os.File, error) {
	tmp := path + ".tmp"
	// A new file, never one found there: whatever a crash (or anyone)
	// left at the name is removed, not written through.
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("booking journal: %w", err)
	}
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("booking journal: %w", err)
	}
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("booking journal %s: %w", path, err)
	}
	return f, nil
}

// OpenJournal starts the booking journal at path: from now on every
// reservation is appended to it before Reserve returns, and WriteSnapshot
// drops what the snapshot holds. Read the old journal (ReadJournal) and
// replay it first: OpenJournal starts an empty one. onErr hears of a
// failing append (once per run of failures).
func (s *Store) OpenJournal(path string, onErr func(error)) error {
	f, err := writeJournalFile(path, journalHeader())
	if err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	s.journal.Store(&journal{path: path, f: f, off: int64(journalHeaderLen), onErr: onErr})
	return nil
}

// closeJournal closes the journal file (Close calls it).
func (s *Store) closeJournal() {
	if j := s.journal.Load(); j != nil {
		j.mu.Lock()
		j.f.Close()
		j.mu.Unlock()
	}
}

// ErrJournal is wrapped by errors about a journal's content.
var ErrJournal = errors.New("invalid booking journal")

// ReadJournalFile reads the bookings of the journal r, which holds at
// most limit bytes (the caller opened and sized it). The magic is checked
// on the first bytes, before the rest is read. A file that is not a
// journal yields no bookings and an error wrapping ErrJournal; a record
// cut short or corrupt ends the reading: the bookings before it are
// returned with an error wrapping ErrJournal.
func ReadJournalFile(r io.Reader, limit int64) ([]Booking, error) {
	data, err := readChecked(r, limit, len(journalMagic), func(head []byte) error {
		if len(head) == len(journalMagic) && string(head) != journalMagic {
			return fmt.Errorf("%w: not a sluice booking journal (bad magic)", ErrJournal)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return DecodeJournal(data)
}

// DecodeJournal parses a journal; see ReadJournal.
func DecodeJournal(data []byte) ([]Booking, error) {
	if len(data) < journalHeaderLen || !bytes.Equal(data[:journalHeaderLen], journalHeader()) {
		if len(data) >= journalHeaderLen && string(data[:len(journalMagic)]) == journalMagic {
			return nil, fmt.Errorf("%w: format version %d; this sluice reads version %d", ErrJournal, binary.BigEndian.Uint16(data[len(journalMagic):]), journalVersion)
		}
		return nil, fmt.Errorf("%w: not a sluice booking journal (bad magic)", ErrJournal)
	}
	var out []Booking
	r := data[journalHeaderLen:]
	for len(r) > 0 {
		b, n, err := decodeBooking(r)
		if err != nil {
			return out, fmt.Errorf("%w: record %d (offset %d): %v; the %d before it are used", ErrJournal, len(out)+1, len(data)-len(r), err, len(out))
		}
		out = append(out, b)
		r = r[n:]
	}
	return out, nil
}

func decodeBooking(r []byte) (Booking, int, error) {
	var b Booking
	l, n := binary.Uvarint(r)
	if n <= 0 || l > maxJournalRecord || uint64(len(r)-n) < l+4 {
		return b, 0, io.ErrUnexpectedEOF
	}
	body := r[n : n+int(l)]
	if crc32.Checksum(body, crcTable) != binary.BigEndian.Uint32(r[n+int(l):]) {
		return b, 0, errors.New("checksum mismatch")
	}
	d := snapDecoder{b: body}
	b.Seq = d.uvarint()
	kl := d.uvarint()
	if d.err == nil && kl > uint64(len(d.b)) {
		d.err = errShort
	}
	if d.err == nil {
		b.Key = string(d.b[:kl])
		d.b = d.b[kl:]
	}
	b.At = d.varint()
	en := d.uvarint()
	b.Exp = d.varint()
	switch {
	case d.err != nil:
		return b, 0, d.err
	case len(d.b) != 0:
		return b, 0, errors.New("trailing bytes in a record")
	case b.Seq == 0 || b.At <= 0 || b.At&1 != 1 || en == 0 || en > maxEvents || b.Exp <= b.At&^1:
		return b, 0, fmt.Errorf("bad booking (seq %d, at %d, n %d, exp %d)", b.Seq, b.At, en, b.Exp)
	}
	b.N = int64(en)
	return b, n + int(l) + 4, nil
}

// ReplayBookings adds journal bookings that the store does not hold yet
// (their sequence number is above the key's latest booking) and that have
// not expired by now. It returns how many were added.
func (s *Store) ReplayBookings(bs []Booking, now time.Time) (int, error) {
	nowNs := now.UnixNano()
	added := 0
	for _, b := range bs {
		s.raiseSeq(b.Seq)
		if b.Exp <= nowNs {
			continue
		}
		ok, err := s.replayOne(b, nowNs)
		if err != nil {
			return added, err
		}
		if ok {
			added++
		}
	}
	return added, nil
}

func (s *Store) replayOne(b Booking, nowNs int64) (bool, error) {
	h := s.hash(b.Key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.find(b.Key, h)
	if k >= 0 && (sh.recs.s[k].kind != kindRate || sh.recs.s[k].algo != limiter.Exact) {
		return false, nil // the key changed meaning since
	}
	if k < 0 {
		var err error
		if k, err = s.create(sh, b.Key, h, kindRate, limiter.Exact, nowNs); err != nil {
			return false, err
		}
	}
	r := &sh.recs.s[k]
	if b.Seq <= uint64(r.t) {
		return false, nil
	}
	r.t = int64(b.Seq)
	var st limiter.State
	sh.load(k, &st)
	st.Log = limiter.InsertEvents(st.Log, b.At, b.N)
	sh.save(k, &st)
	sh.setExp(k, max(r.exp, b.Exp))
	sh.markDirty(k)
	return true, nil
}

// raiseSeq makes the next booking's sequence number above seq.
func (s *Store) raiseSeq(seq uint64) {
	for {
		cur := s.bseq.Load()
		if cur >= seq || s.bseq.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// ReadJournal reads the bookings of the journal at path, at most limit
// bytes, opened as ReadSnapshot opens a snapshot; see ReadJournalFile. A
// missing file wraps os.ErrNotExist.
func ReadJournal(path string, limit int64) ([]Booking, error) {
	f, err := safefs.OpenState(path, limit)
	if err != nil {
		return nil, fmt.Errorf("booking journal: %w", err)
	}
	defer f.Close()
	bs, err := ReadJournalFile(f, limit)
	if err != nil {
		err = fmt.Errorf("booking journal %s: %w", path, err)
	}
	return bs, err
}
