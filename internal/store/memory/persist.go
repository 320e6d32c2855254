package memory

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"sluice/internal/limiter"
)

// persistState is the store file the store writes (one write at a time:
// mu) and the log appended to it (log).
type persistState struct {
	mu      sync.Mutex
	path    string      // the file the store wrote or restored ("": none)
	src     os.FileInfo // the file restored: the first write appends to its
	valid   int64       // first valid bytes, not a new base
	baseLen int64       // the end of the base
	clean   bool        // the file ends with a clean mark
	full    bool        // the next write is a new base: one failed
	buf     []byte
	log     appender
}

// appender appends records to the store file: a write's changes, and
// each booking as it is made (from Reserve, under its key's lock).
type appender struct {
	mu       sync.Mutex
	on       atomic.Bool // bookings are recorded (f or carrying)
	f        *os.File    // nil: no file yet, or it was closed
	off      int64       // the end of the file
	carrying bool        // a new base is written: bookings go to carry too
	carry    []byte
	buf      []byte
	failing  bool // the last booking append failed (logged once)
	log      func(error)
}

// segChunk is how much of a write's changes is held before it is passed
// to the file.
const segChunk = 256 << 10

// minCompact is the log size below which it is never compacted into a
// new base; above it, once it passes the base's size (a variable for the
// tests).
var minCompact int64 = 4 << 20

// write appends b to the file (under a.mu); a record torn by a failing
// write is cut off, as it would hide every later one.
func (a *appender) write(b []byte) error {
	n, err := a.f.WriteAt(b, a.off)
	if err != nil {
		if n > 0 {
			a.f.Truncate(a.off)
		}
		return err
	}
	a.off += int64(n)
	return nil
}

// append appends a write's records.
func (a *appender) append(b []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.write(b)
}

// end returns the end of the file.
func (a *appender) end() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.off
}

// book appends a booking, with one write call: to the page cache, which
// outlives the process, not synced.
func (a *appender) book(k booking) {
	if !a.on.Load() {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.buf = appendBook(a.buf[:0], k)
	if a.carrying {
		a.carry = append(a.carry, a.buf...)
	}
	if a.f == nil {
		return
	}
	err := a.write(a.buf)
	if (err != nil) != a.failing {
		a.failing = err != nil
		if err != nil && a.log != nil {
			a.log(fmt.Errorf("store snapshot: booking append: %w", err))
		}
	}
}

// carryOn starts (or stops) keeping the bookings for a new base.
func (a *appender) carryOn(on bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.carrying, a.carry = on, a.carry[:0]
	a.on.Store(on || a.f != nil)
}

// setFile makes f, of size bytes, the file appended to.
func (a *appender) setFile(f *os.File, size int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f != nil {
		a.f.Close()
	}
	a.f, a.off = f, size
	a.on.Store(f != nil || a.carrying)
}

// snapEntry describes record i of a locked shard as a key record,
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

// encode appends the shard's rate keys to buf, under its lock, and marks
// them clean: with all every live one as a key record (a base), else the
// changed ones, a key holding something as a key record, one that does
// not (or was removed since it changed) as a del record. It returns buf
// and the number of records.
func (sh *shard) encode(buf []byte, nowNs int64, all bool) ([]byte, int) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.trackGone = true
	n := 0
	if !all {
		for _, k := range sh.gone {
			buf = appendDel(buf, []byte(k)) // before the keys held: a key made again wins
			n++
		}
	}
	clear(sh.gone)
	sh.gone = sh.gone[:0]
	if sh.ndirty == 0 && !all {
		return buf, n
	}
	for i := range sh.n {
		r := &sh.recs.s[i]
		if !r.dirty && !all {
			continue
		}
		r.dirty = false
		switch {
		case sh.live(i, nowNs):
			e := sh.snapEntry(i)
			buf = appendKey(buf, &e)
			n++
		case !all && r.kind == kindRate:
			buf = appendDel(buf, sh.key(i))
			n++
		}
	}
	sh.ndirty = 0
	return buf, n
}

// WriteSnapshot saves the store's counts at path. The first write (unless
// the store restored path), and one after the log has grown past the
// base, writes a new base: to a temporary file, synced, the bookings made
// meanwhile appended, renamed over path; from then on every booking is
// appended as it is made. Every other write appends the keys changed
// since the last and a mark, synced (nothing when nothing changed).
func (s *Store) WriteSnapshot(path string, now time.Time, clean bool) (SnapStats, error) {
	p := &s.persist
	p.mu.Lock()
	defer p.mu.Unlock()
	start := time.Now()
	if p.path == path && p.src != nil && !p.full {
		if err := s.reopen(); err != nil {
			s.opts.Logger.Warn("store snapshot: cannot append to the file restored; writing it anew", "file", path, "err", err)
		}
		p.src = nil
	}
	var st SnapStats
	var err error
	if p.path != path || p.full || p.log.f == nil {
		st, err = s.writeBase(path, now, clean)
	} else {
		st, err = s.writeChanges(path, now, clean)
	}
	if err != nil {
		p.full = true // the changes taken are on no disk
		return SnapStats{}, err
	}
	st.Took = time.Since(start)
	return st, nil
}

// reopen opens the file a restore read to append to it: the same file,
// reached without following a link, cut back to its last whole record.
func (s *Store) reopen() error {
	p := &s.persist
	f, err := os.OpenFile(p.path, os.O_WRONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err == nil && (!os.SameFile(fi, p.src) || fi.Size() < p.valid) {
		err = fmt.Errorf("%s changed since it was read", p.path)
	}
	if err == nil && fi.Size() > p.valid {
		err = f.Truncate(p.valid)
	}
	if err != nil {
		f.Close()
		return err
	}
	p.log.setFile(f, p.valid)
	return nil
}

// writeChanges appends the keys changed since the last write, in chunks
// as the shards are encoded, and a mark; or, once the log would pass the
// base's size (and minCompact), writes a new base instead.
func (s *Store) writeChanges(path string, now time.Time, clean bool) (SnapStats, error) {
	p := &s.persist
	// Read before copying: every booking numbered up to here is in a
	// shard not copied yet, or already in the copy.
	from := s.bseq.Load()
	limit := p.baseLen + max(p.baseLen, minCompact)
	start := p.log.end()
	b := p.buf[:0]
	defer func() { p.buf = b[:0] }()
	var st SnapStats
	n := 0
	for i := range s.shards {
		t := time.Now()
		var k int
		b, k = s.shards[i].encode(b, now.UnixNano(), false)
		n += k
		st.MaxHold = max(st.MaxHold, time.Since(t))
		if p.log.end()+int64(len(b)) > limit {
			// Past the base: a new base instead (it holds every key,
			// those this write took included).
			return s.writeBase(path, now, clean)
		}
		if len(b) >= segChunk {
			if err := p.log.append(b); err != nil {
				return st, fmt.Errorf("store snapshot: append to %s: %w", path, err)
			}
			b = b[:0]
		}
	}
	if cap(b) > 2*segChunk {
		b = nil // a large change made it large
	}
	st.Keys = n
	if n == 0 && clean == p.clean {
		return st, nil // nothing changed: nothing to write
	}
	flags := byte(0)
	if clean {
		flags = markClean
	}
	b = appendMark(b, mark{flags: flags, taken: now.UnixNano(), seq: max(from, s.bseq.Load()), from: from, count: uint64(n)})
	err := p.log.append(b)
	if err == nil {
		err = p.log.f.Sync()
	}
	if err != nil {
		return st, fmt.Errorf("store snapshot: append to %s: %w", path, err)
	}
	st.Bytes = p.log.end() - start
	p.clean = clean
	return st, nil
}

// writeBase writes every key to a new file at path, atomically, and
// makes it the file appended to.
func (s *Store) writeBase(path string, now time.Time, clean bool) (SnapStats, error) {
	p := &s.persist
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return SnapStats{}, fmt.Errorf("store snapshot: %w", err)
	}
	tmp := f.Name()
	a := &p.log
	a.carryOn(true)
	ok := false
	defer func() {
		if !ok {
			a.carryOn(false)
			f.Close()
			os.Remove(tmp)
		}
	}()
	st, size, err := s.encodeBase(f, now, clean)
	if err == nil {
		// The key count, a hint for the reader.
		_, err = f.WriteAt(binary.BigEndian.AppendUint32(nil, uint32(min(st.Keys, 1<<32-1))), int64(headerLen-4))
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		return SnapStats{}, fmt.Errorf("store snapshot: write %s: %w", tmp, err)
	}
	// The bookings made while it was written, then the rename: under the
	// appender's lock, so that none is lost between the two files.
	a.mu.Lock()
	if _, err = f.WriteAt(a.carry, size); err == nil {
		err = os.Rename(tmp, path)
	}
	old := a.f
	if ok = err == nil; ok {
		a.f, a.off, a.carrying, a.carry = f, size+int64(len(a.carry)), false, a.carry[:0]
	}
	a.mu.Unlock()
	if !ok {
		return SnapStats{}, fmt.Errorf("store snapshot: %w", err)
	}
	if old != nil {
		old.Close()
	}
	if d, err := os.Open(dir); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return SnapStats{}, fmt.Errorf("store snapshot: sync directory %s: %w", dir, err)
		}
	}
	if p.path != path { // the files of format version 1 go
		os.Remove(path + ".changes")
		os.Remove(path + ".bookings")
	}
	p.path, p.baseLen, p.clean, p.full, p.src = path, size, clean, false, nil
	st.Bytes, st.Full = size, true
	return st, nil
}

// encodeBase writes the base to w: the rate keys, each shard's lock taken
// in turn and only to copy (none waits for the disk), and the base's
// mark. It returns the base's size.
func (s *Store) encodeBase(w io.Writer, now time.Time, clean bool) (SnapStats, int64, error) {
	from := s.bseq.Load() // before copying, as in writeChanges
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.Write(appendHeader(nil, 0))
	size := int64(headerLen)
	var st SnapStats
	b := s.persist.buf[:0]
	for i := range s.shards {
		t := time.Now()
		var n int
		b, n = s.shards[i].encode(b[:0], now.UnixNano(), true)
		st.MaxHold = max(st.MaxHold, time.Since(t))
		bw.Write(b)
		size += int64(len(b))
		st.Keys += n
	}
	flags := byte(markBase)
	if clean {
		flags |= markClean
	}
	b = appendMark(b[:0], mark{flags: flags, taken: now.UnixNano(), seq: max(from, s.bseq.Load()), from: from, count: uint64(st.Keys)})
	bw.Write(b)
	size += int64(len(b))
	if cap(b) <= 2*segChunk {
		s.persist.buf = b[:0]
	}
	return st, size, bw.Flush()
}

// closeFile closes the file appended to (Close calls it); a later write
// starts a new base.
func (s *Store) closeFile() {
	p := &s.persist
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log.setFile(nil, 0)
	p.full = true
}

// bytesPerKey is the file bytes a key may need (ten times the common
// case: about 100 bytes, an exact log a few bytes per event).
const bytesPerKey = 1 << 10

// SnapshotLimit is the largest store file read back for a store capped
// at maxKeys keys: a base what maxKeys keys can fill (1 MiB more), and a
// log as large again, or minCompact (a write past it writes a new base
// instead). A larger file cannot be one of such a store.
func SnapshotLimit(maxKeys int) int64 {
	base := 1<<20 + int64(max(maxKeys, 0))*bytesPerKey
	return 2*base + minCompact
}

// RemoveTemps removes temporary files a crash in the middle of a write
// left next to the store file at path (those of the format before too),
// and returns how many. Call it before the first write.
func RemoveTemps(path string) int {
	n := 0
	pats := []string{filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*"), path + ".bookings.tmp", path + ".changes.tmp"}
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
