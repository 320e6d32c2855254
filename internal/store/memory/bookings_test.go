package memory

import (
	"fmt"
	"path/filepath"
	"reflect"
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

// cloneForTest copies the store through a base, to ask it what it would
// do without changing it.
func (s *Store) cloneForTest(t *testing.T, now time.Time) *Store {
	t.Helper()
	c := New(Options{})
	t.Cleanup(func() { c.Close() })
	if _, err := c.restoreBytes(s.encodeBytes(t, now, false), now); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestBookingsSurviveCrash: bookings made after the last write survive a
// kill -9 as book records; bookings a write holds too (made before its
// copy) are not applied twice; a recovered store numbers its bookings
// above every old one.
func TestBookingsSurviveCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.snapshot")
	s := New(Options{})
	defer s.Close()
	keys := []string{"throttle\x00r\x00relay\x00*", "throttle\x00r\x00relay\x00mx.example"}
	for range 3 {
		book(t, s, t0, keys[0]) // before any file: in the base
	}
	if _, err := s.WriteSnapshot(path, t0, false); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		book(t, s, t0, keys[0]) // appended, then held by the next write too
	}
	if st, err := s.WriteSnapshot(path, t0.Add(time.Millisecond), false); err != nil || st.Keys != 1 {
		t.Fatalf("write after 4 bookings: %+v %v", st, err)
	}
	// After the last write, until the crash: 4 more on one key, 2 on a
	// new one.
	at := t0.Add(100 * time.Millisecond)
	for range 4 {
		book(t, s, at, keys[0])
	}
	book(t, s, at, keys[1])
	book(t, s, at, keys[1])
	later := at.Add(time.Second)
	r, st := crashed(t, path, later)
	if st.Bookings != 6 || st.Clean {
		t.Fatalf("restored %+v, want the 6 bookings after the last write", st)
	}
	for _, k := range keys {
		c := []limiter.Check{{Key: k, Limit: limExact}}
		if got, want := peekAll(t, r, later, c), peekAll(t, s, later, c); !reflect.DeepEqual(got, want) {
			t.Errorf("%q: recovered %+v, original %+v", k, got, want)
		}
	}
	// The next slot on the busy key is the same as the original's.
	if got, want := book(t, r, later, keys[0]), book(t, s.cloneForTest(t, later), later, keys[0]); !got.Equal(want) {
		t.Errorf("next slot %v, original %v", got.Sub(t0), want.Sub(t0))
	}
	if r.bseq.Load() < s.bseq.Load() {
		t.Fatalf("recovered sequence %d below the original's %d", r.bseq.Load(), s.bseq.Load())
	}
}

// TestSnapshotWhileDeciding: writes (new bases and changes) made while 4
// goroutines hit and book (under -race: no data race), each one
// restorable; after the last, the file as a crash leaves it rebuilds
// every booking exactly, those made while a new base was written
// included.
func TestSnapshotWhileDeciding(t *testing.T) {
	defer func(v int64) { minCompact = v }(minCompact)
	minCompact = 0 // a new base at about every other write
	path := filepath.Join(t.TempDir(), "s")
	s := New(Options{Shards: 4})
	defer s.Close()
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
	fulls := 0
	for i := range 20 {
		st, err := s.WriteSnapshot(path, t0, false)
		if err != nil {
			t.Fatal(err)
		}
		if st.Full && i > 0 {
			fulls++
		}
		crashed(t, path, t0)
	}
	close(stop)
	for range 4 {
		<-done
	}
	if fulls == 0 {
		t.Fatal("no new base written while deciding: the case is not made")
	}
	// The last write was made while they ran: the bookings after it are
	// in the file as book records.
	r, _ := crashed(t, path, t0)
	exact := func(s *Store) map[string]SnapEntry {
		m := s.entriesOf(t, t0)
		for k, e := range m {
			if e.Algo != limiter.Exact {
				delete(m, k)
			}
		}
		return m
	}
	if ma, mb := exact(s), exact(r); len(ma) == 0 || !reflect.DeepEqual(ma, mb) {
		t.Fatalf("rebuilt bookings differ: %d keys, %d rebuilt", len(ma), len(mb))
	}
}
