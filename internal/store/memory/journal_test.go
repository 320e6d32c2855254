package memory

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"sluice/internal/limiter"
)

// book reserves one slot of key, failing the test on error.
func book(t *testing.T, s *Store, now time.Time, key string) time.Time {
	t.Helper()
	r, err := s.Reserve(t.Context(), now, key, limExact, 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return r.At
}

// recovered builds a store the way the daemon does after a crash: the
// snapshot, then the journal's bookings.
func recovered(t *testing.T, snap *Snapshot, jpath string, now time.Time) *Store {
	t.Helper()
	r := New(Options{})
	if snap != nil {
		if _, err := r.Restore(snap, now); err != nil {
			t.Fatal(err)
		}
	}
	bs, err := ReadJournal(jpath, SnapshotLimit(testMaxKeys))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReplayBookings(bs, now); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestJournalKeepsBookingsAcrossCrash: bookings made after the last
// snapshot survive a crash through the journal; a snapshot written
// compacts the journal; a journal that still holds what the snapshot
// holds (a crash between the two) applies nothing twice.
func TestJournalKeepsBookingsAcrossCrash(t *testing.T) {
	dir := t.TempDir()
	spath, jpath := filepath.Join(dir, "store.snapshot"), filepath.Join(dir, "store.snapshot.bookings")
	s := New(Options{})
	defer s.Close()
	if err := s.OpenJournal(jpath, func(err error) { t.Error(err) }); err != nil {
		t.Fatal(err)
	}
	keys := []string{"throttle\x00r\x00relay\x00*", "throttle\x00r\x00relay\x00mx.example"}
	for range 7 {
		book(t, s, t0, keys[0])
	}
	if _, err := s.WriteSnapshot(spath, t0, false); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(jpath); fi.Size() != int64(journalHeaderLen) {
		t.Fatalf("journal holds %d bytes after a snapshot of everything", fi.Size())
	}
	// Between this snapshot and the crash: 4 more bookings on one key, 2
	// on a new one. Keep the snapshot of a crash between the next
	// snapshot and its compaction too.
	at := t0.Add(100 * time.Millisecond)
	for range 4 {
		book(t, s, at, keys[0])
	}
	book(t, s, at, keys[1])
	book(t, s, at, keys[1])
	var both bytes.Buffer
	if _, err := s.Encode(&both, at, false); err != nil {
		t.Fatal(err)
	}
	snapBoth, err := DecodeSnapshot(both.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	snap, err := ReadSnapshot(spath, SnapshotLimit(testMaxKeys))
	if err != nil {
		t.Fatal(err)
	}
	later := at.Add(time.Second)
	for name, sn := range map[string]*Snapshot{"older snapshot + journal": snap, "snapshot holding the journal's bookings": snapBoth} {
		r := recovered(t, sn, jpath, later)
		for _, k := range keys {
			c := []limiter.Check{{Key: k, Limit: limExact}}
			if got, want := peekAll(t, r, later, c), peekAll(t, s, later, c); !reflect.DeepEqual(got, want) {
				t.Errorf("%s: %q: recovered %+v, original %+v", name, k, got, want)
			}
		}
		// The next slot on the busy key is the same as the original's.
		if got, want := book(t, r, later, keys[0]), book(t, s.cloneForTest(t, later), later, keys[0]); !got.Equal(want) {
			t.Errorf("%s: next slot %v, original %v", name, got.Sub(t0), want.Sub(t0))
		}
		r.Close()
	}
	// New bookings of a recovered store number above every old one.
	r := recovered(t, snap, jpath, later)
	defer r.Close()
	if r.bseq.Load() < s.bseq.Load() {
		t.Fatalf("recovered sequence %d below the original's %d", r.bseq.Load(), s.bseq.Load())
	}
}

// cloneForTest copies the store through a snapshot, to ask it what it
// would do without changing it.
func (s *Store) cloneForTest(t *testing.T, now time.Time) *Store {
	t.Helper()
	var b bytes.Buffer
	if _, err := s.Encode(&b, now, false); err != nil {
		t.Fatal(err)
	}
	snap, err := DecodeSnapshot(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	c := New(Options{})
	t.Cleanup(func() { c.Close() })
	if _, err := c.Restore(snap, now); err != nil {
		t.Fatal(err)
	}
	return c
}

func journalBytes(bs ...Booking) []byte {
	b := journalHeader()
	for _, x := range bs {
		b = appendBooking(b, x)
	}
	return b
}

// TestJournalMalformed: a foreign or other-version file yields nothing; a
// torn or corrupt record ends the reading with the bookings before it.
func TestJournalMalformed(t *testing.T) {
	exp := t0.Add(time.Hour).UnixNano()
	b1 := Booking{Seq: 1, Key: "k", At: t0.UnixNano() | 1, N: 1, Exp: exp}
	b2 := Booking{Seq: 2, Key: "k", At: t0.UnixNano() + 3, N: 2, Exp: exp}
	good := journalBytes(b1, b2)
	if bs, err := DecodeJournal(good); err != nil || !reflect.DeepEqual(bs, []Booking{b1, b2}) {
		t.Fatalf("well-formed: %v %v", bs, err)
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)-3] ^= 1
	cases := []struct {
		name string
		data []byte
		keep int
		want string
	}{
		{"empty", nil, 0, "bad magic"},
		{"foreign", []byte("SLUICEMS\x00\x01"), 0, "bad magic"},
		{"magic only", []byte("SLUICEBJ"), 0, "bad magic"},
		{"version 2", []byte("SLUICEBJ\x00\x02"), 0, "version 2"},
		{"bit flipped in the last", flipped, 1, "record 2"},
		{"torn last record", good[:len(good)-2], 1, "record 2"},
		{"even slot time", journalBytes(b1, Booking{Seq: 2, Key: "k", At: 2, N: 1, Exp: exp}), 1, "bad booking"},
		{"no events", journalBytes(Booking{Seq: 1, Key: "k", At: 3, N: 0, Exp: exp}), 0, "bad booking"},
		{"expiry before the slot", journalBytes(Booking{Seq: 1, Key: "k", At: exp + 1, N: 1, Exp: exp}), 0, "bad booking"},
		{"sequence 0", journalBytes(Booking{Key: "k", At: 3, N: 1, Exp: exp}), 0, "bad booking"},
		{"huge length", append(journalHeader(), 0xff, 0xff, 0xff, 0xff, 0x0f), 0, "record 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bs, err := DecodeJournal(c.data)
			if !errors.Is(err, ErrJournal) || !strings.Contains(err.Error(), c.want) || len(bs) != c.keep {
				t.Fatalf("got %d bookings, %v; want %d and an error mentioning %q", len(bs), err, c.keep, c.want)
			}
		})
	}
}

// FuzzDecodeJournal: never panics; what it returns encodes back to the
// start of its input.
func FuzzDecodeJournal(f *testing.F) {
	exp := t0.Add(time.Hour).UnixNano()
	f.Add(journalBytes(Booking{Seq: 1, Key: "throttle\x00r\x00p\x00*", At: t0.UnixNano() | 1, N: 1, Exp: exp}, Booking{Seq: 9, Key: "k", At: 5, N: 3, Exp: 9}))
	f.Add(journalHeader())
	f.Fuzz(func(t *testing.T, data []byte) {
		bs, err := DecodeJournal(data)
		if err != nil && !errors.Is(err, ErrJournal) {
			t.Fatal(err)
		}
		if enc := journalBytes(bs...); len(bs) > 0 && !bytes.HasPrefix(data, enc) {
			t.Fatalf("bookings %+v do not encode to the input's start", bs)
		}
		r := New(Options{MaxKeys: 10})
		r.ReplayBookings(bs, t0)
		r.Close()
	})
}

// TestSnapshotWhileDeciding: snapshots written while 4 goroutines hit and
// book (under -race: no data race), each one decodable; after the last,
// the snapshot plus the journal rebuild the store exactly.
func TestSnapshotWhileDeciding(t *testing.T) {
	dir := t.TempDir()
	spath, jpath := filepath.Join(dir, "s"), filepath.Join(dir, "s.bookings")
	s := New(Options{Shards: 4})
	defer s.Close()
	if err := s.OpenJournal(jpath, nil); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{}, 4)
	for w := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			out := make([]limiter.Decision, 1)
			lim := limiter.Limit{Algorithm: limiter.Exact, N: 1000, Period: time.Hour}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				now := t0.Add(time.Duration(i) * time.Microsecond)
				k := fmt.Sprintf("k%d-%d", w, i%50)
				if i%3 == 0 {
					s.Reserve(t.Context(), now, "r"+k, lim, 1, time.Hour)
				} else {
					s.Hit(t.Context(), now, 1, limiter.Leaky, []limiter.Check{{Key: k, Limit: limSmooth}}, out)
				}
			}
		}()
	}
	for range 20 {
		if _, err := s.WriteSnapshot(spath, t0, false); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadSnapshot(spath, SnapshotLimit(testMaxKeys)); err != nil {
			t.Fatal(err)
		}
	}
	// A snapshot taken while they still run, then they stop: the
	// bookings after it are in the journal.
	if _, err := s.WriteSnapshot(spath, t0, false); err != nil {
		t.Fatal(err)
	}
	close(stop)
	for range 4 {
		<-done
	}
	snap, err := ReadSnapshot(spath, SnapshotLimit(testMaxKeys))
	if err != nil {
		t.Fatal(err)
	}
	r := recovered(t, snap, jpath, t0)
	defer r.Close()
	var a, b bytes.Buffer
	s.Encode(&a, t0, false)
	r.Encode(&b, t0, false)
	sa, _ := DecodeSnapshot(a.Bytes())
	sb, _ := DecodeSnapshot(b.Bytes())
	ma, mb := map[string]SnapEntry{}, map[string]SnapEntry{}
	for _, e := range sa.Entries {
		if e.Algo == limiter.Exact {
			ma[e.Key] = e
		}
	}
	for _, e := range sb.Entries {
		if e.Algo == limiter.Exact {
			mb[e.Key] = e
		}
	}
	if len(ma) == 0 || !reflect.DeepEqual(ma, mb) {
		t.Fatalf("rebuilt bookings differ: %d keys, %d rebuilt", len(ma), len(mb))
	}
}
