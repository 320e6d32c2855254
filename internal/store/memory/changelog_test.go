package memory

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"sluice/internal/limiter"
	"sluice/internal/safefs"
)

// manyKeys gives s n keys of each algorithm at now and returns one check
// of each kind per key.
func manyKeys(t *testing.T, s *Store, n int, now time.Time) []limiter.Check {
	t.Helper()
	var checks []limiter.Check
	out := make([]limiter.Decision, 1)
	for i := range n {
		for _, c := range []limiter.Check{
			{Key: fmt.Sprintf("anvil\x00%d", i), Limit: limAnvil, Counter: 1},
			{Key: fmt.Sprintf("exact\x00%d", i), Limit: limiter.Limit{Algorithm: limiter.Exact, N: 10, Period: time.Hour}},
			{Key: fmt.Sprintf("smooth\x00%d", i), Limit: limSmooth},
		} {
			if err := s.Hit(t.Context(), now, 1, limiter.Leaky, []limiter.Check{c}, out); err != nil {
				t.Fatal(err)
			}
			checks = append(checks, c)
		}
	}
	return checks
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// restored reads the files at path into a new store.
func restored(t *testing.T, path string, now time.Time) (*Store, *Snapshot) {
	t.Helper()
	snap, err := ReadSnapshot(path, SnapshotLimit(testMaxKeys))
	if err != nil {
		t.Fatal(err)
	}
	r := New(Options{})
	t.Cleanup(func() { r.Close() })
	if _, err := r.Restore(snap, now); err != nil {
		t.Fatal(err)
	}
	return r, snap
}

// TestIdleWriteWritesNothing: with nothing changed, a write writes no
// byte and leaves both files as they were; only the clean mark changing
// costs a segment of its own, once.
func TestIdleWriteWritesNothing(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	manyKeys(t, s, 1000, t0)
	path := filepath.Join(t.TempDir(), "store.snapshot")
	st, err := s.WriteSnapshot(path, t0.Add(time.Second), false)
	if err != nil || !st.Full || st.Keys != 3000 {
		t.Fatalf("first write %+v %v, want a new base of 3000 keys", st, err)
	}
	base, log := fileSize(t, path), fileSize(t, path+changesSuffix)
	for i := range 12 { // a minute of 5 s intervals
		st, err := s.WriteSnapshot(path, t0.Add(time.Duration(2+5*i)*time.Second), false)
		if err != nil || st.Bytes != 0 || st.Keys != 0 || st.Full {
			t.Fatalf("idle write %d: %+v %v, want nothing written", i, st, err)
		}
	}
	if fileSize(t, path) != base || fileSize(t, path+changesSuffix) != log {
		t.Fatal("an idle write changed the files")
	}
	st, err = s.WriteSnapshot(path, t0.Add(time.Minute), true)
	if err != nil || st.Keys != 0 || st.Bytes == 0 || st.Bytes > 32 {
		t.Fatalf("clean mark: %+v %v, want one small segment", st, err)
	}
	if st, err = s.WriteSnapshot(path, t0.Add(time.Minute), true); err != nil || st.Bytes != 0 {
		t.Fatalf("clean again: %+v %v, want nothing", st, err)
	}
	if _, snap := restored(t, path, t0.Add(time.Minute)); !snap.Clean || !snap.Taken.Equal(t0.Add(time.Minute)) {
		t.Fatalf("restored clean %v taken %v", snap.Clean, snap.Taken)
	}
}

// TestChangesFollowDecisions: after k decisions the write holds the k
// keys changed, not the store; the files restored decide as the store.
func TestChangesFollowDecisions(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	checks := manyKeys(t, s, 3000, t0)
	path := filepath.Join(t.TempDir(), "store.snapshot")
	full, err := s.WriteSnapshot(path, t0, false)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]limiter.Decision, 1)
	now := t0.Add(time.Second)
	for i := range 30 {
		if err := s.Hit(t.Context(), now, 1, limiter.Leaky, checks[i*7:i*7+1], out); err != nil {
			t.Fatal(err)
		}
	}
	before := fileSize(t, path+changesSuffix)
	st, err := s.WriteSnapshot(path, now, false)
	if err != nil || st.Full || st.Keys != 30 {
		t.Fatalf("write after 30 decisions: %+v %v, want 30 keys appended", st, err)
	}
	if grew := fileSize(t, path+changesSuffix) - before; grew != st.Bytes || st.Bytes > full.Bytes/100 {
		t.Fatalf("log grew %d, wrote %d; the base is %d", grew, st.Bytes, full.Bytes)
	}
	t.Logf("base %d bytes for %d keys; 30 decisions: %d bytes", full.Bytes, full.Keys, st.Bytes)
	r, _ := restored(t, path, now)
	if got, want := peekAll(t, r, now, checks), peekAll(t, s, now, checks); !reflect.DeepEqual(got, want) {
		t.Fatal("the restored store decides otherwise")
	}
}

// TestChangeLogOrderAndDeletions: later changes of a key win, and a key
// an undo emptied is gone after a restore.
func TestChangeLogOrderAndDeletions(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	path := filepath.Join(t.TempDir(), "store.snapshot")
	ex := limiter.Check{Key: "e", Limit: limExact}
	sm := limiter.Check{Key: "s", Limit: limSmooth}
	hit := func(now time.Time, c limiter.Check) {
		out := make([]limiter.Decision, 1)
		if err := s.Hit(t.Context(), now, 1, limiter.Strict, []limiter.Check{c}, out); err != nil {
			t.Fatal(err)
		}
	}
	write := func(now time.Time) {
		if _, err := s.WriteSnapshot(path, now, false); err != nil {
			t.Fatal(err)
		}
	}
	hit(t0, ex)
	write(t0)
	hit(t0.Add(time.Millisecond), sm)
	write(t0.Add(time.Millisecond))
	hit(t0.Add(2*time.Millisecond), sm)
	hit(t0.Add(2*time.Millisecond), sm)
	if err := s.Undo(t.Context(), t0.Add(2*time.Millisecond), t0, 1, []limiter.Check{ex}); err != nil {
		t.Fatal(err)
	}
	write(t0.Add(2 * time.Millisecond))
	now := t0.Add(3 * time.Millisecond)
	r, _ := restored(t, path, now)
	checks := []limiter.Check{ex, sm}
	if got, want := peekAll(t, r, now, checks), peekAll(t, s, now, checks); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored\n%+v\noriginal\n%+v", got, want)
	}
	if r.Len() != 1 {
		t.Fatalf("restored %d keys, want 1 (the undone exact key is gone)", r.Len())
	}
}

// TestChangeLogCompacts: once the log passes the base (and minCompact),
// the write is a new base and the log starts again.
func TestChangeLogCompacts(t *testing.T) {
	defer func(v int64) { minCompact = v }(minCompact)
	minCompact = 0
	s := New(Options{})
	defer s.Close()
	checks := manyKeys(t, s, 100, t0)
	path := filepath.Join(t.TempDir(), "store.snapshot")
	if _, err := s.WriteSnapshot(path, t0, false); err != nil {
		t.Fatal(err)
	}
	out := make([]limiter.Decision, 1)
	fulls := 0
	var written, changed int64
	for i := range 40 {
		now := t0.Add(time.Duration(i+1) * time.Millisecond)
		for _, c := range checks[:30] {
			if err := s.Hit(t.Context(), now, 1, limiter.Strict, []limiter.Check{c}, out); err != nil {
				t.Fatal(err)
			}
		}
		st, err := s.WriteSnapshot(path, now, false)
		if err != nil {
			t.Fatal(err)
		}
		written += st.Bytes
		if st.Full {
			fulls++
			if fileSize(t, path+changesSuffix) != int64(changesHeaderLen) {
				t.Fatal("a new base kept the old log")
			}
		} else {
			changed += st.Bytes
		}
	}
	// 30 of 300 keys change per write: a new base about every tenth.
	if fulls < 2 || fulls > 8 || written > 3*changed {
		t.Fatalf("%d new bases in 40 writes; %d bytes written, %d of them changes", fulls, written, changed)
	}
	now := t0.Add(time.Second)
	r, _ := restored(t, path, now)
	if got, want := peekAll(t, r, now, checks), peekAll(t, s, now, checks); !reflect.DeepEqual(got, want) {
		t.Fatal("the restored store decides otherwise")
	}
}

// TestChangeLogTornTail: a segment cut short (a crash in the middle of a
// write) ends the log: the segments before it are used, the snapshot is
// not clean, and the next write keeps them.
func TestChangeLogTornTail(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	path := filepath.Join(t.TempDir(), "store.snapshot")
	out := make([]limiter.Decision, 1)
	a := limiter.Check{Key: "a", Limit: limSmooth}
	b := limiter.Check{Key: "b", Limit: limSmooth}
	s.WriteSnapshot(path, t0, false)
	s.Hit(t.Context(), t0, 1, limiter.Leaky, []limiter.Check{a}, out)
	s.WriteSnapshot(path, t0.Add(time.Millisecond), false)
	s.Hit(t.Context(), t0, 1, limiter.Leaky, []limiter.Check{b}, out)
	s.WriteSnapshot(path, t0.Add(2*time.Millisecond), true)
	log := path + changesSuffix
	if err := os.Truncate(log, fileSize(t, log)-3); err != nil {
		t.Fatal(err)
	}
	r, snap := restored(t, path, t0.Add(time.Second))
	if snap.Clean || !snap.Taken.Equal(t0.Add(time.Millisecond)) || r.Len() != 1 {
		t.Fatalf("clean %v taken %v keys %d; want the first change only, not clean", snap.Clean, snap.Taken, r.Len())
	}
	// Nothing changed since, and the files say not clean: nothing to write.
	if st, err := r.WriteSnapshot(path, t0.Add(time.Second), false); err != nil || st.Bytes != 0 {
		t.Fatalf("first write after the restore: %+v %v", st, err)
	}
	r.Hit(t.Context(), t0.Add(time.Second), 1, limiter.Leaky, []limiter.Check{b}, out)
	if st, err := r.WriteSnapshot(path, t0.Add(2*time.Second), false); err != nil || st.Full {
		t.Fatalf("a change after the restore: %+v %v", st, err)
	}
	if r2, _ := restored(t, path, t0.Add(3*time.Second)); r2.Len() != 2 {
		t.Fatalf("restored %d keys, want a and b", r2.Len())
	}
}

// TestChangeLogOfAnotherBase: a log that names another base (a crash
// between a new base and its new log) is not applied.
func TestChangeLogOfAnotherBase(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	path := filepath.Join(t.TempDir(), "store.snapshot")
	out := make([]limiter.Decision, 1)
	s.WriteSnapshot(path, t0, false)
	s.Hit(t.Context(), t0, 1, limiter.Leaky, []limiter.Check{{Key: "a", Limit: limSmooth}}, out)
	s.WriteSnapshot(path, t0.Add(time.Millisecond), false)
	old, err := os.ReadFile(path + changesSuffix)
	if err != nil {
		t.Fatal(err)
	}
	s2 := New(Options{}) // another store, another base
	defer s2.Close()
	s2.WriteSnapshot(path, t0.Add(time.Second), false)
	os.WriteFile(path+changesSuffix, old, 0o600)
	if r, snap := restored(t, path, t0.Add(time.Second)); r.Len() != 0 || !snap.Taken.Equal(t0.Add(time.Second)) {
		t.Fatalf("restored %d keys taken %v: the old log was applied", r.Len(), snap.Taken)
	}
}

// TestWriteFailureWritesBase: the changes a failed write took are not
// lost: the next write is a new base.
func TestWriteFailureWritesBase(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	path := filepath.Join(t.TempDir(), "store.snapshot")
	out := make([]limiter.Decision, 1)
	s.WriteSnapshot(path, t0, false)
	s.Hit(t.Context(), t0, 1, limiter.Leaky, []limiter.Check{{Key: "a", Limit: limSmooth}}, out)
	s.persist.logf.Close() // the next append fails
	if _, err := s.WriteSnapshot(path, t0.Add(time.Millisecond), false); err == nil {
		t.Fatal("a write to a closed log succeeded")
	}
	if st, err := s.WriteSnapshot(path, t0.Add(2*time.Millisecond), false); err != nil || !st.Full || st.Keys != 1 {
		t.Fatalf("write after a failure: %+v %v, want a new base of 1 key", st, err)
	}
	if r, _ := restored(t, path, t0.Add(3*time.Millisecond)); r.Len() != 1 {
		t.Fatalf("restored %d keys, want 1", r.Len())
	}
}

// TestChangeLogHostile: a change log that is a link, or not a change log,
// refuses the snapshot whole (ReadSnapshot's error), as a bad base does.
func TestChangeLogHostile(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte("SLUICEMC not yours"), 0o600)
	for _, c := range []struct {
		name string
		make func(log string) error
		want error
	}{
		{"symlink", func(p string) error { return os.Symlink(secret, p) }, safefs.ErrNotRegular},
		{"bad magic", func(p string) error { return os.WriteFile(p, []byte("SLUICEMS and more bytes than a header"), 0o600) }, ErrSnapshot},
		{"other version", func(p string) error {
			return os.WriteFile(p, append([]byte(changesMagic), make([]byte, changesHeaderLen)...), 0o600)
		}, ErrSnapshot},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := New(Options{})
			defer s.Close()
			path := filepath.Join(t.TempDir(), "store.snapshot")
			s.WriteSnapshot(path, t0, false)
			os.Remove(path + changesSuffix)
			if err := c.make(path + changesSuffix); err != nil {
				t.Fatal(err)
			}
			if _, err := ReadSnapshot(path, SnapshotLimit(testMaxKeys)); !errors.Is(err, c.want) {
				t.Fatalf("%v, want %v", err, c.want)
			}
		})
	}
}

// seal ends the body with the end record and returns the framed segment,
// as segWriter writes it.
func (sg *segment) seal(seq uint64) []byte {
	sg.end(seq)
	out := binary.BigEndian.AppendUint32(nil, uint32(len(sg.b)))
	out = append(out, sg.b...)
	return binary.BigEndian.AppendUint32(out, crc32.Checksum(sg.b, crcTable))
}

// logOf builds a change log of base ref holding segs.
func logOf(ref baseRef, segs ...[]byte) []byte {
	return append(changesHeader(ref), bytes.Join(segs, nil)...)
}

// TestDecodeChangesMalformed: every bad segment ends the log there, the
// segments before it used, and the result is not clean.
func TestDecodeChangesMalformed(t *testing.T) {
	ref := baseRef{taken: 5, crc: 7}
	var sg segment
	sg.begin(10, true)
	e := SnapEntry{Key: "k", Algo: limiter.Smooth, Exp: 99, T: 98}
	sg.b = appendEntry(sg.b, &e)
	sg.n++
	good := sg.seal(3)
	sg.begin(11, true)
	sg.del([]byte("k"))
	del := sg.seal(4)
	if c, err := decodeChanges(logOf(ref, good, del), ref); err != nil || c.segs != 2 || !c.clean || len(c.list) != 2 || !c.list[1].del || c.seq != 4 {
		t.Fatalf("good log: %+v %v", c, err)
	}
	flip := func(b []byte, i int) []byte { b = bytes.Clone(b); b[i] ^= 0x40; return b }
	for _, c := range []struct {
		name string
		seg  []byte
	}{
		{"cut", del[:len(del)-1]},
		{"checksum", flip(del, len(del)-1)},
		{"body", flip(del, 3)},
		{"length too long", append([]byte{0, 0, 0x7f, 0}, del[4:]...)},
		{"length zero", []byte{0, 0, 0, 0, 0, 0, 0, 0}},
		{"garbage", []byte("garbage garbage garbage")},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := decodeChanges(logOf(ref, good, c.seg), ref)
			if err != nil || got.segs != 1 || got.clean || len(got.list) != 1 || got.taken != 10 {
				t.Fatalf("%+v %v: want the first segment only, not clean", got, err)
			}
		})
	}
	if c, err := decodeChanges(logOf(baseRef{taken: 6, crc: 7}, good), ref); c != nil || err != nil {
		t.Fatalf("another base's log: %+v %v, want ignored", c, err)
	}
}

// FuzzDecodeChanges: the change log decoder never panics, and what it
// accepts is the segments it read.
func FuzzDecodeChanges(f *testing.F) {
	ref := baseRef{taken: 5, crc: 7}
	var sg segment
	sg.begin(10, false)
	e := SnapEntry{Key: "k", Algo: limiter.Exact, Exp: 99, Log: []int64{3, 5}, Seq: 1}
	sg.b = appendEntry(sg.b, &e)
	sg.n++
	sg.del([]byte("x"))
	f.Add(logOf(ref, sg.seal(2)))
	f.Add(logOf(ref))
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := decodeChanges(in, ref)
		if err != nil || c == nil {
			return
		}
		if len(c.raw) > len(in) || (c.segs == 0 && len(c.list) != 0) {
			t.Fatalf("%d segments, %d records, %d raw bytes of %d", c.segs, len(c.list), len(c.raw), len(in))
		}
	})
}

// TestChangeLogKeyGoneBeforeWrite: a key an undo emptied and the sweeper
// dropped before the next write is still written as gone: a restore does
// not bring back the undone event.
func TestChangeLogKeyGoneBeforeWrite(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	path := filepath.Join(t.TempDir(), "store.snapshot")
	ex := limiter.Check{Key: "e", Limit: limExact}
	out := make([]limiter.Decision, 1)
	if err := s.Hit(t.Context(), t0, 1, limiter.Leaky, []limiter.Check{ex}, out); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteSnapshot(path, t0, false); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Millisecond)
	if err := s.Undo(t.Context(), now, t0, 1, []limiter.Check{ex}); err != nil {
		t.Fatal(err)
	}
	s.Sweep(now)
	if s.Len() != 0 {
		t.Fatalf("Len %d: the emptied key was kept", s.Len())
	}
	if st, err := s.WriteSnapshot(path, now, false); err != nil || st.Keys != 1 {
		t.Fatalf("write after the key went: %+v %v, want its deletion", st, err)
	}
	r, _ := restored(t, path, now)
	if err := r.Peek(t.Context(), now, 1, []limiter.Check{ex}, out); err != nil || out[0].Count != 0 || r.Len() != 0 {
		t.Fatalf("restored: %+v %v, Len %d; the undone event came back", out[0], err, r.Len())
	}
}

// TestZeroHitsLeaveNothing: hits of zero events on new keys hold nothing,
// so they do not fill the store.
func TestZeroHitsLeaveNothing(t *testing.T) {
	s := New(Options{MaxKeys: 10})
	defer s.Close()
	out := make([]limiter.Decision, 1)
	for i := range 100 {
		c := []limiter.Check{{Key: fmt.Sprint("z", i), Limit: limExact}}
		if err := s.Hit(t.Context(), t0, 0, limiter.Leaky, c, out); err != nil {
			t.Fatalf("zero hit %d: %v", i, err)
		}
	}
}

// TestRestoreRefusesDuplicateKeys: a snapshot file holding a key twice
// (ReadSnapshot leaves that to Restore) is refused whole: Restore returns
// ErrSnapshot and leaves the store empty.
func TestRestoreRefusesDuplicateKeys(t *testing.T) {
	exp := t0.Add(time.Hour).UnixNano()
	a := rec("a", byte(limiter.Smooth), exp, exp)
	k := rec("k", byte(limiter.Smooth), exp, exp)
	path := filepath.Join(t.TempDir(), "store.snapshot")
	if err := os.WriteFile(path, withCRC(cat(header(1, 0), a, k, k, end(3))), 0o600); err != nil {
		t.Fatal(err)
	}
	snap, err := ReadSnapshot(path, SnapshotLimit(testMaxKeys))
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{})
	defer s.Close()
	if _, err := s.Restore(snap, t0); !errors.Is(err, ErrSnapshot) || s.Len() != 0 {
		t.Fatalf("restore of a key held twice: %v, Len %d; want ErrSnapshot and nothing held", err, s.Len())
	}
	out := make([]limiter.Decision, 1)
	if err := s.Hit(t.Context(), t0, 1, limiter.Leaky, []limiter.Check{{Key: "a", Limit: limSmooth}}, out); err != nil || out[0].Count != 1 {
		t.Fatalf("the store after a refused restore: %+v %v", out[0], err)
	}
}

// TestChangeLogStaysReadable: with a small key cap (a small read limit)
// and a base far smaller than minCompact, every log written is read back:
// the reader's cap is the writer's compaction threshold.
func TestChangeLogStaysReadable(t *testing.T) {
	s := New(Options{MaxKeys: 10})
	defer s.Close()
	path := filepath.Join(t.TempDir(), "store.snapshot")
	out := make([]limiter.Decision, 1)
	c := []limiter.Check{{Key: "e", Limit: limiter.Limit{Algorithm: limiter.Exact, N: limiter.MaxExactN, Period: time.Hour}}}
	for i := range 40 {
		now := t0.Add(time.Duration(i) * time.Second)
		if err := s.Hit(t.Context(), now, 5000, limiter.Leaky, c, out); err != nil {
			t.Fatal(err)
		}
		if _, err := s.WriteSnapshot(path, now, false); err != nil {
			t.Fatal(err)
		}
	}
	if fileSize(t, path+changesSuffix) <= SnapshotLimit(10) {
		t.Fatalf("the log (%d bytes) stayed under the read limit: the case is not made", fileSize(t, path+changesSuffix))
	}
	snap, err := ReadSnapshot(path, SnapshotLimit(10))
	if err != nil {
		t.Fatalf("the log written is refused: %v", err)
	}
	r := New(Options{MaxKeys: 10})
	defer r.Close()
	if _, err := r.Restore(snap, t0.Add(time.Minute)); err != nil || r.Len() != 1 {
		t.Fatalf("restored %d keys: %v", r.Len(), err)
	}
}

// TestLargeSegmentStreams: a change larger than the chunk a write holds
// goes to the log in chunks, as one segment, and reads back whole.
func TestLargeSegmentStreams(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	path := filepath.Join(t.TempDir(), "store.snapshot")
	if _, err := s.WriteSnapshot(path, t0, false); err != nil {
		t.Fatal(err)
	}
	checks := manyKeys(t, s, 10000, t0) // 30,000 keys changed
	st, err := s.WriteSnapshot(path, t0.Add(time.Millisecond), false)
	if err != nil || st.Full || st.Keys != 30000 || st.Bytes <= 2*segChunk {
		t.Fatalf("write: %+v %v, want one segment of 30,000 keys over %d bytes", st, err, 2*segChunk)
	}
	if cap(s.persist.sg.b) > 2*segChunk {
		t.Fatalf("the write kept a buffer of %d bytes", cap(s.persist.sg.b))
	}
	r, snap := restored(t, path, t0.Add(time.Second))
	if !snap.Taken.Equal(t0.Add(time.Millisecond)) {
		t.Fatalf("taken %v: the segment was not read", snap.Taken)
	}
	if got, want := peekAll(t, r, t0.Add(time.Second), checks), peekAll(t, s, t0.Add(time.Second), checks); !reflect.DeepEqual(got, want) {
		t.Fatal("the restored store decides otherwise")
	}
}
