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
	"strings"
	"testing"
	"time"

	"sluice/internal/limiter"
)

var (
	limAnvil  = limiter.Limit{Algorithm: limiter.Anvil, N: 5, Period: time.Minute}
	limExact  = limiter.Limit{Algorithm: limiter.Exact, N: 5, Period: 2 * time.Second}
	limSmooth = limiter.Limit{Algorithm: limiter.Smooth, N: 10, Period: time.Minute, Burst: 3}
)

// fill gives a store keys of every kind: anvil counters, exact logs with
// hits and booked slots, a smooth bucket, and a lease.
func fill(t *testing.T, s *Store, now time.Time) []limiter.Check {
	t.Helper()
	ctx := t.Context()
	checks := []limiter.Check{
		{Key: "anvil\x00a", Limit: limAnvil, Counter: 2},
		{Key: "exact\x00b", Limit: limExact},
		{Key: "smooth\x00c", Limit: limSmooth},
	}
	out := make([]limiter.Decision, 1)
	for i := range 3 {
		for _, c := range checks {
			if err := s.Hit(ctx, now.Add(time.Duration(i)*time.Millisecond), 1, limiter.Strict, []limiter.Check{c}, out); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 7 { // 5 slots now, 2 booked a window later
		if _, err := s.Reserve(ctx, now, "throttle\x00r", limExact, 1, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, ok, err := s.Acquire(ctx, now, "lease\x00x", 3, 0); !ok || err != nil {
		t.Fatal(ok, err)
	}
	return append(checks, limiter.Check{Key: "throttle\x00r", Limit: limExact})
}

func peekAll(t *testing.T, s *Store, now time.Time, checks []limiter.Check) []limiter.Decision {
	t.Helper()
	out := make([]limiter.Decision, len(checks))
	for i, c := range checks {
		if err := s.Peek(t.Context(), now, 1, []limiter.Check{c}, out[i:i+1]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestSnapshotRoundTrip: a store written and restored into a new one
// decides exactly as the original does, at any later time; leases are not
// restored; booked slots are.
func TestSnapshotRoundTrip(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	now := t0
	checks := fill(t, s, now)
	path := filepath.Join(t.TempDir(), "store.snapshot")
	st, err := s.WriteSnapshot(path, now.Add(10*time.Millisecond), true)
	if err != nil {
		t.Fatal(err)
	}
	if st.Keys != 4 || st.Bytes == 0 {
		t.Fatalf("wrote %+v, want 4 rate keys", st)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*tmp*")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	snap, err := ReadSnapshot(path, SnapshotLimit(testMaxKeys))
	if err != nil {
		t.Fatal(err)
	}
	if !snap.Clean || !snap.Taken.Equal(now.Add(10*time.Millisecond)) {
		t.Fatalf("clean %v taken %v", snap.Clean, snap.Taken)
	}
	for _, later := range []time.Duration{500 * time.Millisecond, 1999 * time.Millisecond, 2500 * time.Millisecond, 30 * time.Second} {
		s := New(Options{}) // the original, as it was when written
		fill(t, s, now)
		r := New(Options{})
		if _, err := r.Restore(snap, now.Add(later)); err != nil {
			t.Fatal(err)
		}
		got, want := peekAll(t, r, now.Add(later), checks), peekAll(t, s, now.Add(later), checks)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("after %s: restored store decides\n%+v\nthe original\n%+v", later, got, want)
		}
		if held, _ := r.Held(t.Context(), now.Add(later), "lease\x00x"); held != 0 {
			t.Errorf("a lease was restored")
		}
		// The booked slots are kept: the next booking comes after them.
		res, err := r.Reserve(t.Context(), now.Add(later), "throttle\x00r", limExact, 1, time.Minute)
		want2, err2 := s.Reserve(t.Context(), now.Add(later), "throttle\x00r", limExact, 1, time.Minute)
		if err != nil || err2 != nil || !res.At.Equal(want2.At) {
			t.Errorf("after %s: booked at %v (%v), the original at %v (%v)", later, res.At, err, want2.At, err2)
		}
		r.Close()
		s.Close()
	}
}

// TestSnapshotDropsExpired: keys whose window ended while the daemon was
// down are not restored.
func TestSnapshotDropsExpired(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	fill(t, s, t0)
	var buf bytes.Buffer
	if _, err := s.Encode(&buf, t0, false); err != nil {
		t.Fatal(err)
	}
	snap, err := DecodeSnapshot(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	r := New(Options{})
	defer r.Close()
	// 3 s later the exact keys (2 s window; the last booking at about 2 s)
	// are over; anvil (1 min) and smooth remain.
	st, err := r.Restore(snap, t0.Add(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if st.Keys != 2 || st.Dropped != 2 || r.Len() != 2 {
		t.Fatalf("restored %+v, Len %d; want 2 kept, 2 dropped", st, r.Len())
	}
	if _, err := r.Restore(snap, t0); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("restore into a non-empty store: %v", err)
	}
}

// withCRC appends the checksum a body needs to pass it.
func withCRC(body []byte) []byte {
	return binary.BigEndian.AppendUint32(bytes.Clone(body), crc32.Checksum(body, crcTable))
}

func header(version, flags uint16) []byte {
	h := []byte(snapMagic)
	h = binary.BigEndian.AppendUint16(h, version)
	h = binary.BigEndian.AppendUint16(h, flags)
	return binary.BigEndian.AppendUint64(h, uint64(t0.UnixNano()))
}

func rec(key string, algo byte, exp, t int64, rest ...byte) []byte {
	b := []byte{tagRate}
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = append(b, algo)
	b = binary.AppendVarint(b, exp)
	b = binary.AppendVarint(b, t)
	return append(b, rest...)
}

func end(n uint64) []byte { return endSeq(n, 0) }

func endSeq(n, seq uint64) []byte {
	return binary.AppendUvarint(binary.AppendUvarint([]byte{tagEnd}, n), seq)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// TestSnapshotMalformed: every kind of bad file is refused whole, with a
// reason, and never panics.
func TestSnapshotMalformed(t *testing.T) {
	exp := t0.Add(time.Hour).UnixNano()
	smooth := rec("k", byte(limiter.Smooth), exp, exp)
	good := withCRC(cat(header(1, 0), smooth, end(1)))
	if _, err := DecodeSnapshot(good); err != nil {
		t.Fatalf("the well-formed base case: %v", err)
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x10
	exact := func(events ...byte) []byte { return rec("e", byte(limiter.Exact), exp, 0, events...) }
	cases := []struct {
		name, data, want string
	}{
		{"empty", "", "bad magic"},
		{"foreign", "# sluice config\nstate_dir = \"/x\"\n", "bad magic"},
		{"gzip", "\x1f\x8b\x08\x00\x00\x00\x00\x00", "bad magic"},
		{"header only", string(header(1, 0)), "truncated"},
		{"version 2", string(withCRC(cat(header(2, 0), end(0)))), "version 2"},
		{"version 0", string(withCRC(cat(header(0, 0), end(0)))), "version 0"},
		{"unknown flag", string(withCRC(cat(header(1, 4), end(0)))), "unknown flags"},
		{"bit flipped", string(flipped), "checksum"},
		{"no checksum", string(cat(header(1, 0), smooth, end(1))), "checksum"},
		{"cut in the middle", string(good[:len(good)-7]), "checksum"},
		{"unknown tag", string(withCRC(cat(header(1, 0), []byte{7, 0, 0, 0, 0}, end(1)))), "unknown record tag 7"},
		{"no end record", string(withCRC(cat(header(1, 0), smooth))), "no end record"},
		{"end record swallowed by a key", string(withCRC(cat(header(1, 0), []byte{tagRate, 5, 'k', 0, 0}, end(1)))), "malformed key"},
		{"count over what the bytes hold", string(withCRC(cat(header(1, 0), smooth, end(5)))), "counts 5 keys, more than"},
		{"count of a huge file", string(withCRC(cat(header(1, 0), smooth, end(1<<62)))), "more than"},
		{"records but a count of 0", string(withCRC(cat(header(1, 0), smooth, end(0)))), "more than the 0 keys"},
		{"end record with an 11-byte count", string(withCRC(cat(header(1, 0), smooth, []byte{tagEnd}, bytes.Repeat([]byte{0x81}, 10), []byte{1, 0}))), "no end record"},
		{"count mismatch", string(withCRC(cat(header(1, 0), smooth, end(2)))), "end record says 2"},
		{"trailing bytes", string(withCRC(cat(header(1, 0), smooth, end(1), []byte{0}))), "no end record"},
		{"trailing end record", string(withCRC(cat(header(1, 0), smooth, end(1), end(1)))), "3 bytes after the end record"},
		{"duplicate key", string(withCRC(cat(header(1, 0), smooth, smooth, end(2)))), "appears twice"},
		{"key longer than the file", string(withCRC(cat(header(1, 0), []byte{tagRate, 0xff, 0x7f, 0, 0}, end(1)))), "key length"},
		{"unknown algorithm", string(withCRC(cat(header(1, 0), rec("k", 9, exp, 1), end(1)))), "unknown algorithm 9"},
		{"algorithm 0", string(withCRC(cat(header(1, 0), rec("k", 0, exp, 1), end(1)))), "unknown algorithm 0"},
		{"no expiry", string(withCRC(cat(header(1, 0), rec("k", byte(limiter.Smooth), 0, 1), end(1)))), "expiry 0"},
		{"anvil without window", string(withCRC(cat(header(1, 0), rec("k", byte(limiter.Anvil), exp, 0, 0, 0, 0, 0, 0, 0, 0, 0), end(1)))), "window 0"},
		{"anvil counter too big", string(withCRC(cat(header(1, 0), rec("k", byte(limiter.Anvil), exp, 5, 0x80, 0x80, 0x80, 0x80, 0x10, 0, 0, 0, 0, 0, 0, 0), end(1)))), "counter 0"},
		{"anvil counters cut", string(withCRC(cat(header(1, 0), rec("k", byte(limiter.Anvil), exp, 5, 1, 2), end(1)))), "malformed"},
		{"exact without events", string(withCRC(cat(header(1, 0), exact(0), end(1)))), "0 events"},
		{"exact more events than bytes", string(withCRC(cat(header(1, 0), exact(0xff, 0xff, 0x03, 2), end(1)))), "events"},
		{"exact negative time", string(withCRC(cat(header(1, 0), exact(1, 1), end(1)))), "event time -1"},
		{"exact time overflows", string(withCRC(cat(header(1, 0), exact(append([]byte{2}, binary.AppendUvarint(binary.AppendVarint(nil, 1<<62), 1<<63)...)...), end(1)))), "overflows"},
		{"booking above the last", string(withCRC(cat(header(1, 0), exact(1, 2, 5), endSeq(1, 4)))), "booking 5 above the last, 4"},
		{"no booking number", string(withCRC(cat(header(1, 0), smooth, []byte{tagEnd, 1}))), "no end record"},
		{"bad varint", string(withCRC(cat(header(1, 0), []byte{tagRate, 1, 'k', 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, end(1)))), "malformed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			snap, err := DecodeSnapshot([]byte(c.data))
			if err == nil || snap != nil {
				t.Fatalf("accepted: %+v", snap)
			}
			if !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q, want ErrSnapshot mentioning %q", err, c.want)
			}
		})
	}
	// Every truncation of a real snapshot is refused.
	s := New(Options{})
	defer s.Close()
	fill(t, s, t0)
	var buf bytes.Buffer
	if _, err := s.Encode(&buf, t0, true); err != nil {
		t.Fatal(err)
	}
	full := buf.Bytes()
	for n := range len(full) {
		if _, err := DecodeSnapshot(full[:n]); err == nil {
			t.Fatalf("a snapshot cut to %d of %d bytes was accepted", n, len(full))
		}
	}
}

// TestReadSnapshotFiles: a missing file is os.ErrNotExist (a first start),
// anything else unreadable is ErrSnapshot.
func TestReadSnapshotFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadSnapshot(filepath.Join(dir, "none"), SnapshotLimit(testMaxKeys)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("SLUICEMS garbage"), 0o600)
	if _, err := ReadSnapshot(bad, SnapshotLimit(testMaxKeys)); !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("garbage: %v", err)
	}
	// A write into a directory that does not exist fails cleanly.
	s := New(Options{})
	defer s.Close()
	if _, err := s.WriteSnapshot(filepath.Join(dir, "no", "such"), t0, false); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
}

// TestRestartGuard: after SetRestartGuard(since), exact limits grant
// nothing before since+Period and book no slot before it; anvil and
// smooth limits are not held; after since+Period all is as usual.
func TestRestartGuard(t *testing.T) {
	s := New(Options{})
	defer s.Close()
	ctx := t.Context()
	s.SetRestartGuard(t0)
	out := make([]limiter.Decision, 1)
	ex := limiter.Check{Key: "e", Limit: limExact}
	for _, at := range []time.Duration{0, time.Second, limExact.Period - time.Nanosecond} {
		if err := s.Hit(ctx, t0.Add(at), 1, limiter.Leaky, []limiter.Check{ex}, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Allowed || out[0].RetryAfter != limExact.Period-at {
			t.Fatalf("exact hit %s into the guard: %+v", at, out[0])
		}
		if err := s.Peek(ctx, t0.Add(at), 1, []limiter.Check{ex}, out); err != nil || out[0].Allowed {
			t.Fatalf("peek %s into the guard: %+v %v", at, out[0], err)
		}
	}
	for _, c := range []limiter.Check{{Key: "a", Limit: limAnvil}, {Key: "s", Limit: limSmooth}} {
		if err := s.Hit(ctx, t0, 1, limiter.Leaky, []limiter.Check{c}, out); err != nil || !out[0].Allowed {
			t.Fatalf("%s limit held by the guard: %+v %v", c.Limit.Algorithm, out[0], err)
		}
	}
	// Reservations: the first N go at since+Period, the next after that
	// window; one that cannot wait that long is refused with the time.
	if r, err := s.Reserve(ctx, t0, "r", limExact, 1, time.Second); !errors.Is(err, limiter.ErrTooLong) || !r.At.Equal(t0.Add(limExact.Period)) {
		t.Fatalf("short wait: %+v %v", r, err)
	}
	for i := range limExact.N + 1 {
		r, err := s.Reserve(ctx, t0.Add(time.Second), "r", limExact, 1, time.Minute)
		want := t0.Add(limExact.Period)
		if i == limExact.N {
			want = want.Add(limExact.Period)
		}
		if err != nil || !r.At.Equal(want) {
			t.Fatalf("booking %d: %v %v, want %v", i, r.At, err, want)
		}
	}
	if err := s.Hit(ctx, t0.Add(limExact.Period), 1, limiter.Leaky, []limiter.Check{ex}, out); err != nil || !out[0].Allowed {
		t.Fatalf("exact hit after the guard: %+v %v", out[0], err)
	}
	s.SetRestartGuard(time.Time{})
	if r, err := s.Reserve(ctx, t0, "r2", limExact, 1, 0); err != nil || !r.At.Equal(t0) {
		t.Fatalf("guard off: %+v %v", r, err)
	}
}

// FuzzDecodeSnapshot: the decoder never panics and never allocates beyond
// its input's means; what it accepts encodes back to the same bytes. Each
// input is also tried with its checksum fixed, so the fuzzer reaches the
// record parser.
func FuzzDecodeSnapshot(f *testing.F) {
	exp := t0.Add(time.Hour).UnixNano()
	s := New(Options{})
	defer s.Close()
	now := time.Now()
	ctx := f.Context()
	out := make([]limiter.Decision, 1)
	for _, c := range []limiter.Check{{Key: "a\x00b", Limit: limAnvil, Counter: 1}, {Key: "e", Limit: limExact}, {Key: "s", Limit: limSmooth}} {
		s.Hit(ctx, now, 2, limiter.Strict, []limiter.Check{c}, out)
	}
	s.Reserve(ctx, now, "r", limExact, 3, time.Minute)
	var buf bytes.Buffer
	s.Encode(&buf, now, true)
	f.Add(buf.Bytes())
	f.Add(withCRC(cat(header(1, 0), rec("k", byte(limiter.Smooth), exp, exp), end(1))))
	f.Add(withCRC(cat(header(1, 1), end(0))))
	f.Add([]byte("SLUICEMS"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, in := range [][]byte{data, fixCRC(data)} {
			snap, err := DecodeSnapshot(in)
			if err != nil {
				if snap != nil || !errors.Is(err, ErrSnapshot) {
					t.Fatalf("error %v with a snapshot %v", err, snap)
				}
				continue
			}
			var again bytes.Buffer
			if err := EncodeSnapshot(&again, snap); err != nil {
				t.Fatal(err)
			}
			snap2, err := DecodeSnapshot(again.Bytes())
			if err == nil {
				// The checksum names the bytes, which may differ (a varint
				// need not be in its shortest form): not the content.
				snap.ref.crc, snap2.ref.crc = 0, 0
			}
			if err != nil || !reflect.DeepEqual(snap, snap2) {
				t.Fatalf("round trip: %v\n%+v\n%+v", err, snap, snap2)
			}
			r := New(Options{MaxKeys: 100})
			r.Restore(snap, now)
			r.Close()
		}
	})
}

func fixCRC(data []byte) []byte {
	if len(data) < trailerLen {
		return data
	}
	return withCRC(data[:len(data)-trailerLen])
}

// TestSnapshotCost reports what a snapshot of 300,000 keys (100,000 each
// of anvil, exact with 10 events, smooth) costs: the write, the file, the
// longest a shard's lock is held (what a decision can wait), and the
// restore. It asserts only that everything comes back.
func TestSnapshotCost(t *testing.T) {
	if testing.Short() {
		t.Skip("300,000 keys")
	}
	const n = 100_000
	s := New(Options{})
	defer s.Close()
	out := make([]limiter.Decision, 1)
	exact := limiter.Limit{Algorithm: limiter.Exact, N: 100, Period: time.Hour}
	for i := range n {
		for j, c := range []limiter.Check{
			{Key: fmt.Sprintf("anvil:10.%d.%d", i>>8, i&255), Limit: limiter.Limit{Algorithm: limiter.Anvil, N: limiter.Unlimited, Period: time.Hour}},
			{Key: fmt.Sprintf("exact:user%d@example.org", i), Limit: exact},
			{Key: fmt.Sprintf("smooth:10.%d.%d", i>>8, i&255), Limit: limSmooth},
		} {
			reps := 1
			if j == 1 {
				reps = 10
			}
			for k := range reps {
				if err := s.Hit(t.Context(), t0.Add(time.Duration(k)*time.Millisecond), 1, limiter.Leaky, []limiter.Check{c}, out); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	path := filepath.Join(t.TempDir(), "store.snapshot")
	st, err := s.WriteSnapshot(path, t0.Add(time.Second), true)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	snap, err := ReadSnapshot(path, SnapshotLimit(testMaxKeys))
	if err != nil {
		t.Fatal(err)
	}
	r := New(Options{})
	defer r.Close()
	rst, err := r.Restore(snap, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("%d keys: snapshot %d bytes (%.0f per key) written in %v, longest shard lock %v (64 shards); read and restored in %v",
		st.Keys, st.Bytes, float64(st.Bytes)/float64(st.Keys), st.Took.Round(time.Millisecond), st.MaxHold.Round(time.Microsecond), took.Round(time.Millisecond))
	if st.Keys != 3*n || rst.Keys != 3*n || r.Len() != 3*n {
		t.Fatalf("wrote %d, restored %d, holds %d; want %d", st.Keys, rst.Keys, r.Len(), 3*n)
	}
}
