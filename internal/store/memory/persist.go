package memory

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unsafe"

	"sluice/internal/limiter"
	"sluice/internal/safefs"
)

// persistState is what the snapshot files hold, for the next write (one
// write at a time: mu).
type persistState struct {
	mu   sync.Mutex
	path string // the base the store wrote or was restored from ("": none)
	ref  baseRef
	// baseLen is the base's size; logLen the end of the change log this
	// process writes (0: none started yet).
	baseLen, logLen int64
	logf            *os.File
	// carry is the valid segments of the change log a restore read: the
	// first log this process starts begins with them.
	carry []byte
	// clean says the files end with a clean mark.
	clean bool
	// full says the next write must be a new base: a write failed, and
	// the changes it took are not on disk.
	full bool
	sg   segment
}

// snapSource is what a snapshot read from files says about them.
type snapSource struct {
	path    string
	baseLen int64
	carry   []byte
}

// SnapStats describe one snapshot written or restored.
type SnapStats struct {
	Keys  int           // rate keys written (changed keys, for a change), or restored
	Bytes int64         // bytes written: the new base, or the change appended
	Took  time.Duration // copy, encode and write (or read and decode)
	// Full says a new base was written (the first write, or the change
	// log had grown past the base), not a change appended.
	Full bool
	// MaxHold is the longest one shard's lock was held for its copy: the
	// longest a decision on that shard waited for the snapshot.
	MaxHold time.Duration
	// Dropped counts keys of a restored snapshot that expired while the
	// daemon was down, or did not fit under the key cap.
	Dropped int
	crc     uint32 // the base's checksum
}

// snapEntry describes record i of a locked shard as a snapshot entry,
// aliasing its key and events: encode it before the lock is let go.
func (sh *shard) snapEntry(i int) SnapEntry {
	r := &sh.recs.s[i]
	k := sh.key(i)
	e := SnapEntry{Key: unsafe.String(unsafe.SliceData(k), len(k)), Algo: r.algo, Exp: r.exp}
	switch r.algo {
	case limiter.Anvil:
		e.T = r.t
		e.Counts = *r.counts()
	case limiter.Smooth:
		e.T = r.t
	case limiter.Exact:
		e.Log, e.Seq = sh.events(i), uint64(r.t)
	}
	return e
}

// live reports whether record i is a rate key holding something at now.
func (sh *shard) live(i int, nowNs int64) bool {
	r := &sh.recs.s[i]
	return r.kind == kindRate && r.exp > nowNs && (r.algo != limiter.Exact || r.nev > 0)
}

// copyShard encodes the live rate keys of one shard onto buf, under its
// lock, and marks them clean; it returns buf and the number of keys.
func (s *Store) copyShard(sh *shard, nowNs int64, buf []byte) ([]byte, int) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.trackGone = true
	clear(sh.gone) // the base holds what is left
	sh.gone = sh.gone[:0]
	n := 0
	for i := range sh.n {
		sh.recs.s[i].dirty = false
		if !sh.live(i, nowNs) {
			continue
		}
		e := sh.snapEntry(i)
		buf = appendEntry(buf, &e)
		n++
	}
	sh.ndirty = 0
	return buf, n
}

// encode writes the store's rate keys to w in the snapshot format, taking
// the shards' locks one at a time and only to copy: decisions on other
// shards go on meanwhile, and none waits for the disk. taken is when the
// copy begins; clean marks a snapshot written at a graceful stop, after
// the last decision.
func (s *Store) encode(w io.Writer, taken time.Time, clean bool) (SnapStats, error) {
	sw := newSnapWriter(w, taken, clean)
	// Read before copying: every booking numbered up to here is in a
	// shard not copied yet, or already in the copy.
	seq := s.bseq.Load()
	var buf []byte
	var st SnapStats
	for i := range s.shards {
		t := time.Now()
		var n int
		buf, n = s.copyShard(&s.shards[i], taken.UnixNano(), buf[:0])
		st.MaxHold = max(st.MaxHold, time.Since(t))
		sw.rawEntries(buf, n)
		st.Keys += n
	}
	err := sw.finish(max(seq, s.bseq.Load()))
	st.crc = sw.sum
	return st, err
}

// WriteSnapshot saves the store's counts at path. The first write of a
// store, and one after the change log has grown past the base, writes a
// new base: atomically, to a temporary file in the same directory,
// synced, renamed over path, the directory synced, then a new, empty
// change log (path+".changes") started for it. Every other write appends
// to the change log only the keys changed since the write before, as one
// segment, synced: nothing at all when nothing changed (unless the clean
// mark changes). A reader sees each write whole or not at all.
func (s *Store) WriteSnapshot(path string, now time.Time, clean bool) (SnapStats, error) {
	p := &s.persist
	p.mu.Lock()
	defer p.mu.Unlock()
	start := time.Now()
	j := s.journal.Load()
	var jfrom int64
	if j != nil {
		jfrom = j.offset() // what is journaled by now is in the copy
	}
	var st SnapStats
	var err error
	if p.path != path || p.full {
		st, err = s.writeFull(path, now, clean)
	} else {
		st, err = s.writeChanges(path, now, clean)
	}
	if err != nil {
		p.full = true // the changes taken are on no disk
		return SnapStats{}, err
	}
	st.Took = time.Since(start)
	if j != nil {
		if err := j.compact(jfrom); err != nil {
			return st, fmt.Errorf("store snapshot written, but: %w", err)
		}
	}
	return st, nil
}

// writeChanges appends the keys changed since the last write to the
// change log as one segment, streamed shard by shard (the write holds a
// chunk in memory, not the segment), or, when the log would pass the
// base's size (and minCompact), writes a new base instead.
func (s *Store) writeChanges(path string, now time.Time, clean bool) (SnapStats, error) {
	p := &s.persist
	sw, err := s.openSegment(path, now, clean)
	if err != nil {
		return SnapStats{}, err
	}
	defer func() { p.sg.b = sw.sg.b }() // the chunk buffer, for the next write
	limit := max(p.baseLen, minCompact)
	var st SnapStats
	for i := range s.shards {
		t := time.Now()
		s.shards[i].encodeDirty(&sw.sg, now.UnixNano())
		st.MaxHold = max(st.MaxHold, time.Since(t))
		if sw.size() > limit {
			// Past the base: a new base instead (it holds every key,
			// those this segment took included).
			sw.abort()
			return s.writeFull(path, now, clean)
		}
		if len(sw.sg.b) >= segChunk {
			sw.flush()
		}
	}
	st.Keys = sw.sg.n
	if sw.sg.n == 0 && clean == p.clean && sw.body == 0 {
		sw.abort()
		return st, nil // nothing changed: nothing to write
	}
	n, err := sw.finish(s.bseq.Load())
	if err != nil {
		sw.abort()
		return st, fmt.Errorf("store snapshot: change log %s: %w", path+changesSuffix, err)
	}
	if sw.tmp != "" {
		// The first change of this process: its new log, holding the
		// segments a restore read and this one, takes the old one's name.
		if err := os.Rename(sw.tmp, path+changesSuffix); err != nil {
			sw.abort()
			return st, fmt.Errorf("store snapshot: change log: %w", err)
		}
		p.logf, p.carry = sw.f, nil
	}
	p.logLen = sw.start + n
	st.Bytes = n
	if sw.tmp != "" {
		st.Bytes = p.logLen
	}
	p.clean = clean
	return st, nil
}

// writeFull writes a new base and starts its change log.
func (s *Store) writeFull(path string, now time.Time, clean bool) (SnapStats, error) {
	p := &s.persist
	st, err := s.writeBase(path, now, clean)
	if err != nil {
		return st, err
	}
	if p.logf != nil {
		p.logf.Close()
	}
	p.path, p.ref, p.baseLen, p.clean = path, baseRef{taken: now.UnixNano(), crc: st.crc}, st.Bytes, clean
	p.logf, p.logLen, p.carry, p.full = nil, 0, nil, false
	hdr := changesHeader(p.ref)
	f, err := writeChangesFile(path+changesSuffix, hdr)
	if err != nil {
		// The base holds everything; the next write tries again.
		p.full = true
		return st, fmt.Errorf("store snapshot written, but: %w", err)
	}
	p.logf, p.logLen = f, int64(len(hdr))
	st.Bytes += p.logLen
	st.Full = true
	return st, nil
}

// writeBase writes every key to a new base at path, atomically.
func (s *Store) writeBase(path string, now time.Time, clean bool) (SnapStats, error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return SnapStats{}, fmt.Errorf("store snapshot: %w", err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	st, err := s.encode(f, now, clean)
	if err != nil {
		return SnapStats{}, fmt.Errorf("store snapshot: write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return SnapStats{}, fmt.Errorf("store snapshot: sync %s: %w", tmp, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return SnapStats{}, fmt.Errorf("store snapshot: %w", err)
	}
	if err := f.Close(); err != nil {
		return SnapStats{}, fmt.Errorf("store snapshot: close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return SnapStats{}, fmt.Errorf("store snapshot: %w", err)
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return SnapStats{}, fmt.Errorf("store snapshot: sync directory %s: %w", dir, err)
		}
	}
	st.Bytes = fi.Size()
	return st, nil
}

// bytesPerKey is the snapshot bytes a store may need per key it holds
// (a key is about 100 bytes in the file, an exact log a few bytes per
// event): SnapshotLimit allows ten times the common case.
const bytesPerKey = 1 << 10

// SnapshotLimit is the largest snapshot (or booking journal) file read
// back for a store capped at maxKeys keys: a larger one cannot be a
// snapshot of such a store, and reading it would cost more memory than
// the store itself.
func SnapshotLimit(maxKeys int) int64 {
	return 1<<20 + int64(max(maxKeys, 0))*bytesPerKey
}

// ReadSnapshotFile reads and decodes the snapshot r, which holds at most
// limit bytes (the caller opened and sized it). The magic and version
// are checked on the first bytes, before the rest is read: a file that
// is not a snapshot costs a 16-byte read.
func ReadSnapshotFile(r io.Reader, limit int64) (*Snapshot, error) {
	data, err := readChecked(r, limit, headerLen, checkHead)
	if err != nil {
		return nil, err
	}
	return decodeSnapshot(data, true)
}

// readSnapshotData reads the snapshot file f, of size bytes by its
// fstat (which safefs.OpenState held to the limit): its magic and
// version on its first bytes, then its end record on its last
// (checkCount), and only then the whole file, into one buffer of exactly
// its size. A file that is not a snapshot, or whose size does not fit
// the keys it counts, costs two short reads; a file that grew since the
// fstat is refused.
func readSnapshotData(f *os.File, size int64) ([]byte, error) {
	head := make([]byte, min(size, int64(headerLen)))
	if _, err := f.ReadAt(head, 0); err != nil {
		return nil, err
	}
	if err := checkHead(head); err != nil {
		return nil, err
	}
	if size >= int64(headerLen+2+trailerLen) {
		tail := make([]byte, min(size-int64(headerLen), maxTailLen))
		if _, err := f.ReadAt(tail, size-int64(len(tail))); err != nil {
			return nil, err
		}
		if _, err := checkCount(size, tail); err != nil {
			return nil, err
		}
	}
	data := make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil {
		return nil, err
	}
	var more [1]byte
	if n, _ := f.ReadAt(more[:], size); n != 0 {
		return nil, fmt.Errorf("%w: the file grew while it was read", ErrSnapshot)
	}
	return data, nil
}

// checkHead judges a snapshot's magic and version on its first bytes
// (fewer when the file is shorter: what it cannot judge it passes, and
// the decoder reports the truncation).
func checkHead(head []byte) error {
	if len(head) < len(snapMagic) {
		return nil
	}
	if string(head[:len(snapMagic)]) != snapMagic {
		return fmt.Errorf("%w: not a sluice store snapshot (bad magic)", ErrSnapshot)
	}
	if len(head) < len(snapMagic)+2 {
		return nil
	}
	if v := binary.BigEndian.Uint16(head[len(snapMagic):]); v != snapVersion {
		return fmt.Errorf("%w: format version %d; this sluice reads version %d", ErrSnapshot, v, snapVersion)
	}
	return nil
}

// readChecked reads r whole (at most limit bytes) once check accepted
// what its first n bytes are (fewer when the file is shorter: check
// passes what it cannot judge, and the decoder reports the truncation).
func readChecked(r io.Reader, limit int64, n int, check func(head []byte) error) ([]byte, error) {
	head := make([]byte, n)
	got, err := io.ReadFull(r, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	head = head[:got]
	if err := check(head); err != nil {
		return nil, err
	}
	rest, err := io.ReadAll(io.LimitReader(r, limit-int64(got)+1))
	if err != nil {
		return nil, err
	}
	if int64(got+len(rest)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return append(head, rest...), nil
}

// ErrNotEmpty is returned by Restore on a store that already holds keys.
var ErrNotEmpty = errors.New("store snapshot: restore needs an empty store")

// Restore loads a decoded snapshot into an empty store, before it serves
// (a snapshot holding a key twice, or one it cannot load, leaves the
// store empty and returns an error wrapping ErrSnapshot, or the error):
// the base's keys, then the changes of its log. Keys that expired by now
// (while the daemon was down) are dropped, so every window continues
// exactly where it was; keys beyond the cap are dropped too (the soonest
// to expire first would be better; the cap is rarely reached by a
// snapshot of a store with the same cap). A snapshot read from files
// (ReadSnapshot) makes them the store's: its next write appends to them
// what changed since.
func (s *Store) Restore(snap *Snapshot, now time.Time) (SnapStats, error) {
	start := time.Now()
	if s.Len() != 0 {
		return SnapStats{}, ErrNotEmpty
	}
	nowNs := now.UnixNano()
	var st SnapStats
	keyBytes := 0
	for i := range snap.Entries {
		keyBytes += len(snap.Entries[i].Key)
	}
	if err := s.presize(min(len(snap.Entries), s.opts.MaxKeys), keyBytes); err != nil {
		return st, err
	}
	for i := range snap.Entries {
		se := &snap.Entries[i]
		if se.Exp <= nowNs || s.Len() >= s.opts.MaxKeys {
			st.Dropped++
			continue
		}
		added, err := s.restoreOne(se, false)
		if err == nil && !added {
			err = fmt.Errorf("%w: key %s appears twice", ErrSnapshot, quoteKey(se.Key))
		}
		if err != nil {
			s.reset()
			return SnapStats{}, err
		}
	}
	for i := range snap.changes {
		c := &snap.changes[i]
		if c.del || c.e.Exp <= nowNs {
			s.forget(c.e.Key)
			continue
		}
		if _, err := s.restoreOne(&c.e, true); err != nil {
			if errors.Is(err, limiter.ErrFull) {
				st.Dropped++
				continue
			}
			s.reset()
			return SnapStats{}, err
		}
	}
	st.Keys = s.Len()
	s.raiseSeq(snap.Seq)
	s.observe(nowNs)
	if src := snap.src; src != nil {
		p := &s.persist
		p.mu.Lock()
		p.path, p.ref, p.baseLen, p.carry, p.clean = src.path, snap.ref, src.baseLen, src.carry, snap.Clean
		p.mu.Unlock()
		for i := range s.shards {
			sh := &s.shards[i]
			sh.mu.Lock()
			sh.trackGone = true
			sh.mu.Unlock()
		}
	}
	st.Took = time.Since(start)
	return st, nil
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

// reset empties the store (a restore that failed half-way: a snapshot is
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

// forget drops key, if held (a change log's deletion).
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

// restoreOne adds one snapshot entry; a key held already is kept, or,
// with replace, given the entry's state.
func (s *Store) restoreOne(se *SnapEntry, replace bool) (bool, error) {
	h := s.hash(se.Key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
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

// RemoveTemps removes temporary files a crash in the middle of a write
// left next to the snapshot at path (and its journal), and returns how
// many. Call it before the first write.
func RemoveTemps(path string) int {
	n := 0
	pats := []string{filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*"), path + ".bookings.tmp", path + changesSuffix + ".tmp"}
	for _, p := range pats {
		ms, _ := filepath.Glob(p)
		for _, m := range ms {
			if os.Remove(m) == nil {
				n++
			}
		}
	}
	return n
}

// ReadSnapshot reads and decodes the snapshot at path, at most limit
// bytes (SnapshotLimit). The file must be a regular file, reached without
// following a symbolic link (safefs): anything else is refused before it
// is opened. A missing file returns an error wrapping os.ErrNotExist; a
// file that is not a valid snapshot one wrapping ErrSnapshot.
func ReadSnapshot(path string, limit int64) (*Snapshot, error) {
	f, err := safefs.OpenState(path, limit)
	if err != nil {
		return nil, fmt.Errorf("store snapshot: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("store snapshot: %w", err)
	}
	data, err := readSnapshotData(f, fi.Size())
	if err != nil {
		return nil, fmt.Errorf("store snapshot %s: %w", path, err)
	}
	snap, err := decodeSnapshot(data, true)
	if err != nil {
		return nil, fmt.Errorf("store snapshot %s: %w", path, err)
	}
	// A log never passes the base's size or minCompact (a write that
	// would make it a new base instead).
	c, err := readChanges(path, max(fi.Size(), minCompact), snap.ref)
	if err != nil {
		return nil, err
	}
	c.apply(snap)
	snap.src = &snapSource{path: path, baseLen: fi.Size()}
	if c != nil {
		snap.src.carry = c.raw
	}
	return snap, nil
}
