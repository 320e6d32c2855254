package memory

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"sluice/internal/limiter"
	"sluice/internal/safefs"
)

// SnapStats describe one write of the store file, or one restore.
type SnapStats struct {
	Keys    int           // rate keys written (changed keys, for a change), or restored
	Bytes   int64         // bytes written: the new base, or the change appended
	Took    time.Duration // copy, encode and write (or read and decode)
	Full    bool          // a new base was written, not a change appended
	MaxHold time.Duration // the longest a shard's lock was held for its copy
	// Dropped counts keys of a restored file that expired while the
	// daemon was down, or did not fit under the key cap.
	Dropped int
	// Taken is when the copy of the last write restored began, Clean
	// whether it was made at a graceful stop.
	Taken time.Time
	Clean bool
	// Bookings counts the throttle slots booked after the last write
	// that the restore added; Cut the bytes after the last whole record
	// (a write cut short, or a corrupt record), cut off by the next write.
	Bookings int
	Cut      int64
}

// ErrNotEmpty is returned by Restore on a store that already holds keys.
var ErrNotEmpty = errors.New("store snapshot: restore needs an empty store")

// Restore reads the store file at path, at most limit bytes
// (SnapshotLimit), into the empty store, before it serves: a regular file
// reached without following a link (safefs), or an error (wrapping
// os.ErrNotExist for none). The base is used whole or not at all (an
// error wrapping ErrSnapshot, the store left empty); then the log's
// records up to the first cut short or corrupt (Cut); last the bookings
// no write holds. Keys expired by now, or beyond the cap, are dropped.
func (s *Store) Restore(path string, limit int64, now time.Time) (SnapStats, error) {
	start := time.Now()
	if s.Len() != 0 {
		return SnapStats{}, ErrNotEmpty
	}
	f, err := safefs.OpenState(path, limit)
	if err != nil {
		return SnapStats{}, fmt.Errorf("store snapshot: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return SnapStats{}, fmt.Errorf("store snapshot: %w", err)
	}
	st, base, err := s.restoreFrom(f, fi.Size(), now)
	if err != nil {
		return SnapStats{}, fmt.Errorf("store snapshot %s: %w", path, err)
	}
	p := &s.persist
	p.mu.Lock()
	p.path, p.clean, p.src, p.valid, p.baseLen = path, st.Clean, fi, fi.Size()-st.Cut, base
	p.mu.Unlock()
	st.Took = time.Since(start)
	return st, nil
}

// ErrOldFormat is wrapped by the error for a file of format version 1
// (an older sluice's base, next to its change log and booking journal):
// not read; the first write replaces the three with one file.
var ErrOldFormat = fmt.Errorf("%w: format version 1 (an older sluice's), not read", ErrSnapshot)

// checkHead judges a file's magic and version on its first bytes.
func checkHead(head []byte) error {
	if len(head) < headerLen || string(head[:len(snapMagic)]) != snapMagic {
		return fmt.Errorf("%w: not a sluice store snapshot (bad magic, or %d bytes)", ErrSnapshot, len(head))
	}
	switch v := binary.BigEndian.Uint16(head[len(snapMagic):]); v {
	case snapVersion:
		return nil
	case 1:
		return ErrOldFormat
	default:
		return fmt.Errorf("%w: format version %d; this sluice reads version %d (and 1)", ErrSnapshot, v, snapVersion)
	}
}

// minRecord is about the smallest a key record is: the tables are sized
// for the base's key count, at most the file's size over it.
const minRecord = 24

// replay is what the log's records say as they are read.
type replay struct {
	st      SnapStats
	covered uint64 // the bookings up to here are in the records read
	seq     uint64 // the highest booking number seen
	pending []booking
}

// restoreFrom reads a store file of size bytes from r into the empty
// store (Restore), and returns the base's size.
func (s *Store) restoreFrom(r io.ReaderAt, size int64, now time.Time) (SnapStats, int64, error) {
	head := make([]byte, min(size, int64(headerLen)))
	if _, err := r.ReadAt(head, 0); err != nil && err != io.EOF {
		return SnapStats{}, 0, err
	}
	if err := checkHead(head); err != nil {
		return SnapStats{}, 0, err
	}
	hint := int64(binary.BigEndian.Uint32(head[headerLen-4:]))
	n := min(hint, size/minRecord, int64(s.opts.MaxKeys))
	if err := s.presize(int(n), int(min(size/2, n*64))); err != nil {
		return SnapStats{}, 0, err
	}
	nowNs := now.UnixNano()
	rr := &recordReader{r: r, size: size, off: int64(headerLen)}
	d := snapDecoder{alias: true}
	var rp replay
	if err := s.restoreBase(rr, &d, &rp, nowNs); err != nil {
		s.reset()
		return SnapStats{}, 0, err
	}
	base := rr.off
	for {
		valid := rr.off
		typ, b, err := rr.next()
		if err == io.EOF {
			break
		}
		var fatal error
		if err == nil {
			d.b, d.err = b, nil
			err, fatal = s.replayRecord(&rp, typ, &d, nowNs)
		}
		if fatal != nil {
			s.reset()
			return SnapStats{}, 0, fatal
		}
		if err != nil {
			rp.st.Cut, rp.st.Clean = size-valid, false
			break
		}
	}
	if err := s.replayBookings(&rp, nowNs); err != nil {
		s.reset()
		return SnapStats{}, 0, err
	}
	return rp.st, base, nil
}

// restoreBase reads the base: its key records and the mark that counts
// them.
func (s *Store) restoreBase(rr *recordReader, d *snapDecoder, rp *replay, nowNs int64) error {
	n := uint64(0)
	for {
		typ, b, err := rr.next()
		if err == io.EOF {
			err = errors.New("no mark closes it (truncated)")
		}
		if err != nil {
			return fmt.Errorf("%w: the base: %v", ErrSnapshot, err)
		}
		d.b, d.err = b, nil
		switch typ {
		case recMark:
			m, err := d.mark()
			if err == nil && (m.flags&markBase == 0 || m.count != n) {
				err = fmt.Errorf("%w: the base's mark (flags %#x) counts %d keys; it holds %d", ErrSnapshot, m.flags, m.count, n)
			}
			if err == nil {
				rp.onMark(m)
			}
			return err
		case recKey:
		default:
			return fmt.Errorf("%w: a record of type %d in the base", ErrSnapshot, typ)
		}
		e, err := d.keyRecord()
		if err != nil {
			return err
		}
		n++
		if e.Exp <= nowNs || s.Len() >= s.opts.MaxKeys {
			rp.st.Dropped++
			continue
		}
		added, err := s.restoreOne(&e, false)
		if err == nil && !added {
			err = fmt.Errorf("%w: key %s appears twice", ErrSnapshot, quoteKey(e.Key))
		}
		if err != nil {
			return err
		}
	}
}

// onMark notes a write's mark.
func (rp *replay) onMark(m mark) {
	rp.st.Taken, rp.st.Clean = timeOf(m.taken), m.flags&markClean != 0
	rp.seq = max(rp.seq, m.seq)
	rp.covered = max(rp.covered, m.from)
	kept := rp.pending[:0]
	for _, k := range rp.pending {
		if k.seq > rp.covered {
			kept = append(kept, k)
		}
	}
	rp.pending = kept
}

// replayRecord applies one record of the log: a malformed one returns
// bad (it ends the log), a store that cannot take it fatal.
func (s *Store) replayRecord(rp *replay, typ byte, d *snapDecoder, nowNs int64) (bad, fatal error) {
	rp.st.Clean = false
	switch typ {
	case recKey:
		e, err := d.keyRecord()
		if err != nil {
			return err, nil
		}
		if e.Exp <= nowNs {
			s.forget(e.Key)
			return nil, nil
		}
		if _, err := s.restoreOne(&e, true); errors.Is(err, limiter.ErrFull) {
			rp.st.Dropped++
		} else if err != nil {
			return nil, err
		}
	case recDel:
		s.forget(string(d.b))
	case recBook:
		k, err := d.booking()
		if err != nil {
			return err, nil
		}
		rp.seq = max(rp.seq, k.seq)
		if k.seq > rp.covered {
			rp.pending = append(rp.pending, k)
		}
	case recMark:
		m, err := d.mark()
		if err == nil && m.flags&markBase != 0 {
			err = fmt.Errorf("%w: a base mark in the log", ErrSnapshot)
		}
		if err != nil {
			return err, nil
		}
		rp.onMark(m)
	default:
		return fmt.Errorf("%w: unknown record type %d", ErrSnapshot, typ), nil
	}
	return nil, nil
}

// replayBookings adds the bookings no write holds, unless the key's
// state holds them already (its latest booking's number is not below),
// or they have expired by now; and makes the next booking's number
// above every one read.
func (s *Store) replayBookings(rp *replay, nowNs int64) error {
	s.raiseSeq(rp.seq)
	for _, k := range rp.pending {
		if k.exp <= nowNs {
			continue
		}
		ok, err := s.replayBooking(k, nowNs)
		if errors.Is(err, limiter.ErrFull) {
			rp.st.Dropped++
			continue
		}
		if err != nil {
			return err
		}
		if ok {
			rp.st.Bookings++
		}
	}
	rp.st.Keys = s.Len()
	s.observe(nowNs)
	return nil
}

func (s *Store) replayBooking(b booking, nowNs int64) (bool, error) {
	h := s.hash(b.key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.find(b.key, h)
	if k >= 0 && (sh.recs.s[k].kind != kindRate || sh.recs.s[k].algo != limiter.Exact) {
		return false, nil // the key changed meaning since
	}
	if k < 0 {
		var err error
		if k, err = s.create(sh, b.key, h, kindRate, limiter.Exact, nowNs); err != nil {
			return false, err
		}
	}
	r := &sh.recs.s[k]
	if b.seq <= uint64(r.t) {
		return false, nil
	}
	r.t = int64(b.seq)
	var st limiter.State
	sh.load(k, &st)
	st.Log = limiter.InsertEvents(st.Log, b.at, b.n)
	sh.save(k, &st)
	sh.setExp(k, max(r.exp, b.exp))
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

// presize gives every shard of an empty store room for its share of n
// keys of keyBytes in all, so a restore does not grow them step by step.
func (s *Store) presize(n, keyBytes int) error {
	if n < len(s.shards)*minRecs {
		return nil // small: the shards a few keys fall in grow as needed
	}
	per := n/len(s.shards) + n/len(s.shards)/4 + 16
	kper := keyBytes/len(s.shards) + keyBytes/len(s.shards)/4 + 1024
	slots := 2 * minRecs
	for slots*maxLoad < per*8 {
		slots *= 2
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		err := sh.recs.alloc(per, sh.n)
		if err == nil && slots > len(sh.slots.s) {
			err = sh.rehash(slots)
		}
		if err == nil && kper > cap(sh.keys) {
			err = sh.repack(kper / 2)
		}
		sh.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// reset empties the store (a restore that failed half-way: a base is
// used whole or not at all).
func (s *Store) reset() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.release()
		sh.mu.Lock()
		sh.minExp, sh.gone, sh.moves = 0, nil, sh.moves+1
		sh.mu.Unlock()
	}
	s.n.Store(0)
}

// forget drops key, if held (a del record).
func (s *Store) forget(key string) {
	h := s.hash(key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i := sh.find(key, h); i >= 0 {
		sh.remove(i)
		s.n.Add(-1)
	}
}

// restoreOne adds one key record; a key held already is kept, or, with
// replace, given the record's state.
func (s *Store) restoreOne(se *SnapEntry, replace bool) (bool, error) {
	h := s.hash(se.Key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.trackGone = true // a key in the file that goes is written as gone
	i := sh.find(se.Key, h)
	switch {
	case i >= 0 && !replace:
		return false, nil
	case i >= 0 && (sh.recs.s[i].kind != kindRate || sh.recs.s[i].algo != se.Algo):
		sh.remove(i)
		s.n.Add(-1)
		i = -1
	}
	if i < 0 {
		if s.Len() >= s.opts.MaxKeys {
			return false, limiter.ErrFull
		}
		var err error
		if i, err = sh.insert(se.Key, h, kindRate, se.Algo); err != nil {
			return false, err
		}
		s.n.Add(1)
	}
	r := &sh.recs.s[i]
	switch se.Algo {
	case limiter.Anvil:
		r.t = se.T
		*r.counts() = se.Counts
	case limiter.Smooth:
		r.t = se.T
	case limiter.Exact:
		r.t = int64(se.Seq)
		sh.keepLog(r, se.Log, 0)
	}
	sh.setExp(i, se.Exp)
	return true, nil
}
