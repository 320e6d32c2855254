package memory

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"sluice/internal/limiter"
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

// restored reads the file at path into a new store.
func restored(t *testing.T, path string, now time.Time) (*Store, SnapStats) {
	t.Helper()
	r := New(Options{})
	t.Cleanup(func() { r.Close() })
	st, err := r.Restore(path, SnapshotLimit(testMaxKeys), now)
	if err != nil {
		t.Fatal(err)
	}
	return r, st
}

// crashed is the file at path as a kill -9 leaves it (appends are in the
// page cache, which outlives the process): a copy, restored.
func crashed(t *testing.T, path string, now time.Time) (*Store, SnapStats) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "copy")
	if err := os.WriteFile(cp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return restored(t, cp, now)
}

// TestIdleWriteWritesNothing: with nothing changed, a write writes no
// byte and leaves the file as it was; only the clean mark changing costs
// a record of its own, once.
func TestIdleWriteWritesNothing(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	manyKeys(t, s, 1000, t0)
	path := filepath.Join(t.TempDir(), "store.snapshot")
	st, err := s.WriteSnapshot(path, t0.Add(time.Second), false)
	if err != nil || !st.Full || st.Keys != 3000 || st.Bytes != fileSize(t, path) {
		t.Fatalf("first write %+v %v, want a new base of 3000 keys", st, err)
	}
	size := fileSize(t, path)
	for i := range 12 { // a minute of 5 s intervals
		st, err := s.WriteSnapshot(path, t0.Add(time.Duration(2+5*i)*time.Second), false)
		if err != nil || st.Bytes != 0 || st.Keys != 0 || st.Full {
			t.Fatalf("idle write %d: %+v %v, want nothing written", i, st, err)
		}
	}
	if fileSize(t, path) != size {
		t.Fatal("an idle write changed the file")
	}
	st, err = s.WriteSnapshot(path, t0.Add(time.Minute), true)
	if err != nil || st.Keys != 0 || st.Bytes == 0 || st.Bytes > 32 {
		t.Fatalf("clean mark: %+v %v, want one small record", st, err)
	}
	if st, err = s.WriteSnapshot(path, t0.Add(time.Minute), true); err != nil || st.Bytes != 0 {
		t.Fatalf("clean again: %+v %v, want nothing", st, err)
	}
	if _, st := restored(t, path, t0.Add(time.Minute)); !st.Clean || !st.Taken.Equal(t0.Add(time.Minute)) {
		t.Fatalf("restored clean %v taken %v", st.Clean, st.Taken)
	}
}

// TestChangesFollowDecisions: after k decisions the write appends the k
// keys changed, not the store; the file restored decides as the store.
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
	before := fileSize(t, path)
	st, err := s.WriteSnapshot(path, now, false)
	if err != nil || st.Full || st.Keys != 30 {
		t.Fatalf("write after 30 decisions: %+v %v, want 30 keys appended", st, err)
	}
	if grew := fileSize(t, path) - before; grew != st.Bytes || st.Bytes > full.Bytes/100 {
		t.Fatalf("the file grew %d, wrote %d; the base is %d", grew, st.Bytes, full.Bytes)
	}
	t.Logf("base %d bytes for %d keys; 30 decisions: %d bytes", full.Bytes, full.Keys, st.Bytes)
	r, _ := restored(t, path, now)
	if got, want := peekAll(t, r, now, checks), peekAll(t, s, now, checks); !reflect.DeepEqual(got, want) {
		t.Fatal("the restored store decides otherwise")
	}
}

// TestLogOrderAndDeletions: later records of a key win, and a key an
// undo emptied is gone after a restore.
func TestLogOrderAndDeletions(t *testing.T) {
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

// TestLogCompacts: once the log passes the base (and minCompact), the
// write is a new base holding nothing else.
func TestLogCompacts(t *testing.T) {
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
			if fileSize(t, path) != st.Bytes {
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

// TestLogTornTail: a write cut short (a crash in the middle of it) ends
// the log: the records before it are used, the file is not clean, and
// the next write cuts the torn bytes off and appends after the last
// whole record.
func TestLogTornTail(t *testing.T) {
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
	s.Close()
	// The last write's mark cut: b's record is whole, and used.
	if err := os.Truncate(path, fileSize(t, path)-3); err != nil {
		t.Fatal(err)
	}
	r, st := restored(t, path, t0.Add(time.Second))
	if st.Clean || !st.Taken.Equal(t0.Add(time.Millisecond)) || r.Len() != 2 || st.Cut == 0 {
		t.Fatalf("%+v, %d keys; want both keys, the first write's time, not clean, bytes cut", st, r.Len())
	}
	// Nothing changed since, and the file says not clean: nothing to
	// write, the torn bytes are cut.
	if st, err := r.WriteSnapshot(path, t0.Add(time.Second), false); err != nil || st.Bytes != 0 {
		t.Fatalf("first write after the restore: %+v %v", st, err)
	}
	c := limiter.Check{Key: "c", Limit: limSmooth}
	r.Hit(t.Context(), t0.Add(time.Second), 1, limiter.Leaky, []limiter.Check{c}, out)
	if st, err := r.WriteSnapshot(path, t0.Add(2*time.Second), false); err != nil || st.Full {
		t.Fatalf("a change after the restore: %+v %v", st, err)
	}
	if r2, st := restored(t, path, t0.Add(3*time.Second)); r2.Len() != 3 || st.Cut != 0 {
		t.Fatalf("restored %d keys (%+v), want a, b and c", r2.Len(), st)
	}
}

// TestRestoredFileReplaced: a file put at the name after the restore read
// it is not appended to: the next write is a new base.
func TestRestoredFileReplaced(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	path := filepath.Join(t.TempDir(), "store.snapshot")
	fill(t, s, t0)
	s.WriteSnapshot(path, t0, true)
	r, _ := restored(t, path, t0)
	data, _ := os.ReadFile(path)
	os.Remove(path)
	os.WriteFile(path, data, 0o600)
	st, err := r.WriteSnapshot(path, t0.Add(time.Millisecond), false)
	if err != nil || !st.Full {
		t.Fatalf("write after the file was replaced: %+v %v, want a new base", st, err)
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
	s.persist.log.f.Close() // the next append fails
	if _, err := s.WriteSnapshot(path, t0.Add(time.Millisecond), false); err == nil {
		t.Fatal("a write to a closed file succeeded")
	}
	if st, err := s.WriteSnapshot(path, t0.Add(2*time.Millisecond), false); err != nil || !st.Full || st.Keys != 1 {
		t.Fatalf("write after a failure: %+v %v, want a new base of 1 key", st, err)
	}
	if r, _ := restored(t, path, t0.Add(3*time.Millisecond)); r.Len() != 1 {
		t.Fatalf("restored %d keys, want 1", r.Len())
	}
}

// TestLogKeyGoneBeforeWrite: a key an undo emptied and the sweeper
// dropped before the next write is still written as gone: a restore does
// not bring back the undone event.
func TestLogKeyGoneBeforeWrite(t *testing.T) {
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

// TestRestoreRefusesDuplicateKeys: a base holding a key twice is refused
// whole: Restore returns ErrSnapshot and leaves the store empty and
// usable.
func TestRestoreRefusesDuplicateKeys(t *testing.T) {
	exp := t0.Add(time.Hour).UnixNano()
	a := keyRec("a", byte(limiter.Smooth), exp, exp)
	k := keyRec("k", byte(limiter.Smooth), exp, exp)
	path := filepath.Join(t.TempDir(), "store.snapshot")
	if err := os.WriteFile(path, fileOf(a, k, k, markRec(markBase, 3)), 0o600); err != nil {
		t.Fatal(err)
	}
	s := New(Options{})
	defer s.Close()
	if _, err := s.Restore(path, SnapshotLimit(testMaxKeys), t0); !errors.Is(err, ErrSnapshot) || s.Len() != 0 {
		t.Fatalf("restore of a key held twice: %v, Len %d; want ErrSnapshot and nothing held", err, s.Len())
	}
	out := make([]limiter.Decision, 1)
	if err := s.Hit(t.Context(), t0, 1, limiter.Leaky, []limiter.Check{{Key: "a", Limit: limSmooth}}, out); err != nil || out[0].Count != 1 {
		t.Fatalf("the store after a refused restore: %+v %v", out[0], err)
	}
}

// TestLogStaysReadable: with a small key cap (a small read limit) and a
// base far smaller than minCompact, every file written is read back: the
// reader's cap allows what the writer's compaction lets the log reach.
func TestLogStaysReadable(t *testing.T) {
	s := New(Options{MaxKeys: 10})
	defer s.Close()
	path := filepath.Join(t.TempDir(), "store.snapshot")
	out := make([]limiter.Decision, 1)
	c := []limiter.Check{{Key: "e", Limit: limiter.Limit{Algorithm: limiter.Exact, N: limiter.MaxExactN, Period: time.Hour}}}
	var biggest []byte
	fulls := 0
	for i := range 40 {
		now := t0.Add(time.Duration(i) * time.Second)
		if err := s.Hit(t.Context(), now, 10000, limiter.Leaky, c, out); err != nil {
			t.Fatal(err)
		}
		st, err := s.WriteSnapshot(path, now, false)
		if err != nil {
			t.Fatal(err)
		}
		if st.Full {
			fulls++
		}
		if fileSize(t, path) > int64(len(biggest)) {
			biggest, _ = os.ReadFile(path)
		}
	}
	// Past what 10 keys can fill (1 MiB and 10 KiB), and compacted.
	if len(biggest) <= 2<<20 || fulls < 2 {
		t.Fatalf("the file reached %d bytes, %d new bases: the case is not made", len(biggest), fulls)
	}
	os.WriteFile(path, biggest, 0o600)
	r := New(Options{MaxKeys: 10})
	defer r.Close()
	if _, err := r.Restore(path, SnapshotLimit(10), t0.Add(time.Minute)); err != nil || r.Len() != 1 {
		t.Fatalf("the largest file written (%d bytes) is refused: %v", len(biggest), err)
	}
}

// TestLargeChangeStreams: a change larger than the chunk a write holds
// goes to the file in chunks and reads back whole; the write does not
// keep a large buffer.
func TestLargeChangeStreams(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	path := filepath.Join(t.TempDir(), "store.snapshot")
	if _, err := s.WriteSnapshot(path, t0, false); err != nil {
		t.Fatal(err)
	}
	checks := manyKeys(t, s, 10000, t0) // 30,000 keys changed
	st, err := s.WriteSnapshot(path, t0.Add(time.Millisecond), false)
	if err != nil || st.Full || st.Keys != 30000 || st.Bytes <= 2*segChunk {
		t.Fatalf("write: %+v %v, want 30,000 keys appended, over %d bytes", st, err, 2*segChunk)
	}
	if cap(s.persist.buf) > 2*segChunk {
		t.Fatalf("the write kept a buffer of %d bytes", cap(s.persist.buf))
	}
	r, rst := restored(t, path, t0.Add(time.Second))
	if !rst.Taken.Equal(t0.Add(time.Millisecond)) {
		t.Fatalf("taken %v: the change was not read", rst.Taken)
	}
	if got, want := peekAll(t, r, t0.Add(time.Second), checks), peekAll(t, s, t0.Add(time.Second), checks); !reflect.DeepEqual(got, want) {
		t.Fatal("the restored store decides otherwise")
	}
}

// TestRestoreRefusesVersion1: the files of format version 1 (an older
// sluice's) are refused with ErrOldFormat, the store starts empty, and
// its first write replaces the base and removes the change log and the
// booking journal.
func TestRestoreRefusesVersion1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.snapshot")
	for _, p := range []string{path, path + ".changes", path + ".bookings"} {
		os.WriteFile(p, []byte("SLUICEMS\x00\x01\x00\x00and the rest"), 0o600)
	}
	s := New(Options{})
	defer s.Close()
	if _, err := s.Restore(path, SnapshotLimit(testMaxKeys), t0); !errors.Is(err, ErrOldFormat) || !errors.Is(err, ErrSnapshot) || s.Len() != 0 {
		t.Fatalf("%v, Len %d; want ErrOldFormat", err, s.Len())
	}
	fill(t, s, t0)
	if st, err := s.WriteSnapshot(path, t0, false); err != nil || !st.Full {
		t.Fatalf("first write: %+v %v", st, err)
	}
	for _, side := range []string{".changes", ".bookings"} {
		if _, err := os.Lstat(path + side); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s kept: %v", side, err)
		}
	}
	if r, _ := restored(t, path, t0); r.Len() != 4 {
		t.Fatalf("restored %d keys", r.Len())
	}
}
