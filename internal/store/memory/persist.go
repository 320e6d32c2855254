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

// persistState is the state of the snapshot files.
type persistState struct{ mu sync.Mutex }

// SnapStats describe one snapshot written or restored.
type SnapStats struct {
	Keys  int           // rate keys written, or restored
	Bytes int64         // file size
	Took  time.Duration // copy, encode and write (or read and decode)
	// MaxHold is the longest one shard's lock was held for its copy: the
	// longest a decision on that shard waited for the snapshot.
	MaxHold time.Duration
	// Dropped counts keys of a restored snapshot that expired while the
	// daemon was down, or did not fit under the key cap.
	Dropped int
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
		for c := range e.Counts {
			e.Counts[c] = uint32(uint64(r.d[c/2]) >> (32 * (c % 2)))
		}
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
	return st, sw.finish(max(seq, s.bseq.Load()))
}

// WriteSnapshot writes the store to path atomically: to a temporary file
// in the same directory, synced, then renamed over path, and the
// directory synced. A reader sees the old snapshot or the new one, never
// a part.
func (s *Store) WriteSnapshot(path string, now time.Time, clean bool) (SnapStats, error) {
	start := time.Now()
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
	j := s.journal.Load()
	var jfrom int64
	if j != nil {
		jfrom = j.offset() // what is journaled by now is in the copy
	}
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
	st.Bytes, st.Took = fi.Size(), time.Since(start)
	if j != nil {
		if err := j.compact(jfrom); err != nil {
			return st, fmt.Errorf("store snapshot written, but: %w", err)
		}
	}
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
	data, err := readChecked(r, limit, headerLen, func(head []byte) error {
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
	})
	if err != nil {
		return nil, err
	}
	return DecodeSnapshot(data)
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

// Restore loads a decoded snapshot into an empty store, before it serves.
// Keys that expired by now (while the daemon was down) are dropped, so
// every window continues exactly where it was; keys beyond the cap are
// dropped too (the soonest to expire first would be better; the cap is
// rarely reached by a snapshot of a store with the same cap).
func (s *Store) Restore(snap *Snapshot, now time.Time) (SnapStats, error) {
	start := time.Now()
	if s.Len() != 0 {
		return SnapStats{}, ErrNotEmpty
	}
	nowNs := now.UnixNano()
	var st SnapStats
	for i := range snap.Entries {
		se := &snap.Entries[i]
		if se.Exp <= nowNs || s.Len() >= s.opts.MaxKeys {
			st.Dropped++
			continue
		}
		added, err := s.restoreOne(se)
		if err != nil {
			return st, err
		}
		if added {
			st.Keys++
		}
	}
	s.raiseSeq(snap.Seq)
	s.observe(nowNs)
	st.Took = time.Since(start)
	return st, nil
}

// restoreOne adds one snapshot entry, unless its key is held already.
func (s *Store) restoreOne(se *SnapEntry) (bool, error) {
	h := s.hash(se.Key)
	sh := s.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.find(se.Key, h) >= 0 {
		return false, nil
	}
	i, err := sh.insert(se.Key, h, kindRate, se.Algo)
	if err != nil {
		return false, err
	}
	s.n.Add(1)
	r := &sh.recs.s[i]
	switch se.Algo {
	case limiter.Anvil:
		r.t = se.T
		for c := range r.d {
			r.d[c] = int64(uint64(se.Counts[2*c]) | uint64(se.Counts[2*c+1])<<32)
		}
	case limiter.Smooth:
		r.t = se.T
	case limiter.Exact:
		r.t = int64(se.Seq)
		sh.keepLog(r, se.Log)
	}
	sh.setExp(i, se.Exp)
	return true, nil
}

// RemoveTemps removes temporary files a crash in the middle of a write
// left next to the snapshot at path (and its journal), and returns how
// many. Call it before the first write.
func RemoveTemps(path string) int {
	n := 0
	pats := []string{filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*"), path + ".bookings.tmp"}
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
	snap, err := ReadSnapshotFile(f, limit)
	if err != nil {
		return nil, fmt.Errorf("store snapshot %s: %w", path, err)
	}
	return snap, nil
}
