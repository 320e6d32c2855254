package memory

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"sluice/internal/limiter"
)

// v1Base is a base of version 1 holding entries.
func v1Base(taken time.Time, clean bool, seq uint64, entries ...SnapEntry) []byte {
	b := binary.BigEndian.AppendUint16([]byte(snapMagic), 1)
	flags := uint16(0)
	if clean {
		flags = markClean
	}
	b = binary.BigEndian.AppendUint16(b, flags)
	b = binary.BigEndian.AppendUint64(b, uint64(taken.UnixNano()))
	for i := range entries {
		b = appendEntry(append(b, tagRate), &entries[i])
	}
	b = binary.AppendUvarint(binary.AppendUvarint(append(b, tagEnd), uint64(len(entries))), seq)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

// v1Changes is a change log of version 1 of base holding segs.
func v1Changes(base []byte, segs ...[]byte) []byte {
	b := binary.BigEndian.AppendUint16([]byte("SLUICEMC"), 1)
	b = append(b, base[12:20]...)
	b = append(b, base[len(base)-4:]...)
	return cat(b, cat(segs...))
}

// v1Seg is a segment of version 1 holding n tagged records.
func v1Seg(taken time.Time, clean bool, seq uint64, n int, recs ...byte) []byte {
	body := []byte{0}
	if clean {
		body[0] = markClean
	}
	body = binary.BigEndian.AppendUint64(body, uint64(taken.UnixNano()))
	body = append(body, recs...)
	body = binary.AppendUvarint(binary.AppendUvarint(append(body, tagEnd), uint64(n)), seq)
	b := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	return binary.BigEndian.AppendUint32(append(b, body...), crc32.Checksum(body, crcTable))
}

// v1Journal is a booking journal of version 1.
func v1Journal(bs ...booking) []byte {
	b := binary.BigEndian.AppendUint16([]byte("SLUICEBJ"), 1)
	for _, k := range bs {
		body := appendBooking(nil, k)
		b = append(binary.AppendUvarint(b, uint64(len(body))), body...)
		b = binary.BigEndian.AppendUint32(b, crc32.Checksum(body, crcTable))
	}
	return b
}

// TestRestoreVersion1: a host upgraded from the format before restores
// its base, the change log's segments up to a torn one and the journal's
// bookings up to a torn one (none twice); the first write replaces them
// with one file of this format holding the same, and removes the others.
func TestRestoreVersion1(t *testing.T) {
	exp := t0.Add(time.Hour).UnixNano()
	ev := t0.UnixNano()
	base := v1Base(t0, false, 2,
		SnapEntry{Key: "a", Algo: limiter.Anvil, Exp: exp, T: t0.Unix(), Counts: [limiter.MaxCounters]uint32{3}},
		SnapEntry{Key: "s", Algo: limiter.Smooth, Exp: exp, T: ev},
		SnapEntry{Key: "e", Algo: limiter.Exact, Exp: exp, Log: []int64{ev, ev + 2}, Seq: 2})
	smooth2 := SnapEntry{Key: "s", Algo: limiter.Smooth, Exp: exp, T: ev + 7}
	seg1 := v1Seg(t0.Add(time.Second), false, 2, 2, cat(appendEntry([]byte{tagRate}, &smooth2), []byte{tagDel, 1, 'a'})...)
	seg2 := v1Seg(t0.Add(2*time.Second), true, 2, 0)
	cases := []struct {
		name    string
		changes []byte
		journal []byte
		clean   bool
	}{
		{"whole", v1Changes(base, seg1, seg2), v1Journal(booking{seq: 1, key: "e", at: ev + 1, n: 1, exp: exp}, booking{seq: 3, key: "e", at: ev + 5, n: 1, exp: exp}), true},
		{"torn", v1Changes(base, seg1, seg2[:len(seg2)-1]), cat(v1Journal(booking{seq: 3, key: "e", at: ev + 5, n: 1, exp: exp}), []byte{9, 1, 2}), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "store.snapshot")
			os.WriteFile(path, base, 0o600)
			os.WriteFile(path+".changes", c.changes, 0o600)
			os.WriteFile(path+".bookings", c.journal, 0o600)
			r, st := restored(t, path, t0.Add(3*time.Second))
			if !st.Converted || st.Clean != c.clean || st.Bookings != 1 || r.Len() != 2 {
				t.Fatalf("restored %+v, %d keys", st, r.Len())
			}
			got := r.entriesOf(t, t0)
			want := map[string]SnapEntry{"s": smooth2, "e": {Key: "e", Algo: limiter.Exact, Exp: exp, Log: []int64{ev, ev + 2, ev + 5}, Seq: 3}}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("restored\n%+v\nwant\n%+v", got, want)
			}
			if st, err := r.WriteSnapshot(path, t0.Add(3*time.Second), false); err != nil || !st.Full {
				t.Fatalf("first write: %+v %v, want a new base", st, err)
			}
			for _, side := range []string{".changes", ".bookings"} {
				if _, err := os.Lstat(path + side); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s kept: %v", side, err)
				}
			}
			r2, st2 := restored(t, path, t0.Add(3*time.Second))
			if st2.Converted || !reflect.DeepEqual(r2.entriesOf(t, t0), want) {
				t.Fatalf("the new file restores %+v", r2.entriesOf(t, t0))
			}
		})
	}
	// A change log of another base is ignored; a bad base refused whole.
	path := filepath.Join(t.TempDir(), "store.snapshot")
	os.WriteFile(path, base, 0o600)
	os.WriteFile(path+".changes", v1Changes(v1Base(t0.Add(time.Second), false, 0), seg1), 0o600)
	if r, _ := restored(t, path, t0); r.Len() != 3 {
		t.Fatalf("another base's log: %d keys, want the base's 3", r.Len())
	}
	bad := append([]byte(nil), base...)
	bad[30] ^= 1
	os.WriteFile(path, bad, 0o600)
	r := New(Options{})
	defer r.Close()
	if _, err := r.Restore(path, SnapshotLimit(testMaxKeys), t0); !errors.Is(err, ErrSnapshot) || r.Len() != 0 {
		t.Fatalf("a corrupt base of version 1: %v, %d keys", err, r.Len())
	}
}
