package memory

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
	"strings"
	"testing"
	"time"

	"sluice/internal/limiter"
)

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// frame builds a record of type typ holding payload.
func frame(typ byte, payload ...byte) []byte {
	b, start := openRecord(nil, typ)
	return closeRecord(append(b, payload...), start)
}

// keyRec builds a key record by hand; rest is what follows T.
func keyRec(key string, algo byte, exp, t int64, rest ...byte) []byte {
	b := binary.AppendUvarint(nil, uint64(len(key)))
	b = append(b, key...)
	b = append(b, algo)
	b = binary.AppendVarint(b, exp)
	b = binary.AppendVarint(b, t)
	return frame(recKey, append(b, rest...)...)
}

func markRec(flags byte, count uint64) []byte {
	return appendMark(nil, mark{flags: flags, taken: t0.UnixNano(), count: count})
}

// fileOf is a header and records.
func fileOf(recs ...[]byte) []byte { return cat(appendHeader(nil, 0), cat(recs...)) }

// TestRestoreMalformedBase: every kind of bad file or base is refused
// whole, with a reason, leaves the store empty, and never panics; so is
// every prefix of a real base.
func TestRestoreMalformedBase(t *testing.T) {
	exp := t0.Add(time.Hour).UnixNano()
	smooth := keyRec("k", byte(limiter.Smooth), exp, exp)
	good := fileOf(smooth, markRec(markBase, 1))
	r := New(Options{})
	defer r.Close()
	if _, err := r.restoreBytes(good, t0); err != nil || r.Len() != 1 {
		t.Fatalf("the well-formed base case: %v", err)
	}
	flipped := bytes.Clone(good)
	flipped[headerLen+6] ^= 0x10
	exact := func(events ...byte) []byte { return keyRec("e", byte(limiter.Exact), exp, 0, events...) }
	withVersion := func(v uint16) []byte {
		b := bytes.Clone(good)
		binary.BigEndian.PutUint16(b[len(snapMagic):], v)
		return b
	}
	base := func(recs ...[]byte) string {
		return string(fileOf(append(recs, markRec(markBase, uint64(len(recs))))...))
	}
	cases := []struct {
		name, data, want string
	}{
		{"empty", "", "bad magic"},
		{"foreign", "# sluice config\nstate_dir = \"/x\"\n", "bad magic"},
		{"gzip", "\x1f\x8b\x08\x00\x00\x00\x00\x00", "bad magic"},
		{"magic only", snapMagic, "bad magic, or 8 bytes"},
		{"header only", string(fileOf()), "no mark closes it"},
		{"version 3", string(withVersion(3)), "version 3"},
		{"version 0", string(withVersion(0)), "version 0"},
		{"bit flipped", string(flipped), "checksum mismatch"},
		{"cut in the mark", string(good[:len(good)-7]), "record length"},
		{"cut in the length", string(good[:headerLen+2]), "cut short"},
		{"no mark", string(fileOf(smooth)), "no mark closes it"},
		{"length zero", string(fileOf([]byte{0, 0, 0, 0, 1, 0, 0, 0, 0})), "record length 0"},
		{"length huge", string(fileOf([]byte{0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0, 0})), "record length 4294967295"},
		{"length past the end", string(fileOf([]byte{0, 0, 1, 0, 1, 0, 0, 0, 0})), "record length 256"},
		{"unknown type", base(frame(7, 1, 2)), "type 7 in the base"},
		{"a del in the base", base(frame(recDel, 'k')), "type 2 in the base"},
		{"a booking in the base", base(appendBook(nil, booking{seq: 1, key: "k", at: 3, n: 1, exp: exp})), "type 3 in the base"},
		{"mark counts more", string(fileOf(smooth, markRec(markBase, 2))), "counts 2 keys; it holds 1"},
		{"mark not the base's", string(fileOf(smooth, markRec(0, 1))), "the base's mark (flags 0x0)"},
		{"mark with an unknown flag", string(fileOf(smooth, markRec(markBase|8, 1))), "bad mark"},
		{"mark with bytes after it", string(fileOf(smooth, frame(recMark, cat(markRec(markBase, 1)[5:len(markRec(markBase, 1))-4], []byte{0})...))), "bytes after it"},
		{"mark: bookings held above those given out", string(fileOf(smooth, appendMark(nil, mark{flags: markBase, from: 5, seq: 4, count: 1}))), "bad mark"},
		{"duplicate key", base(smooth, smooth), "appears twice"},
		{"key longer than the record", base(frame(recKey, 0xff, 0x7f, 0, 0)), "key length"},
		{"unknown algorithm", base(keyRec("k", 9, exp, 1)), "unknown algorithm 9"},
		{"algorithm 0", base(keyRec("k", 0, exp, 1)), "unknown algorithm 0"},
		{"no expiry", base(keyRec("k", byte(limiter.Smooth), 0, 1)), "expiry 0"},
		{"bytes after a key", base(keyRec("k", byte(limiter.Smooth), exp, 1, 0)), "bytes after it"},
		{"anvil without window", base(keyRec("k", byte(limiter.Anvil), exp, 0, 0, 0, 0, 0, 0, 0, 0, 0)), "window 0"},
		{"anvil counter too big", base(keyRec("k", byte(limiter.Anvil), exp, 5, 0x80, 0x80, 0x80, 0x80, 0x10, 0, 0, 0, 0, 0, 0, 0)), "counter 0"},
		{"anvil counters cut", base(keyRec("k", byte(limiter.Anvil), exp, 5, 1, 2)), "malformed"},
		{"exact without events", base(exact(0)), "0 events"},
		{"exact more events than bytes", base(exact(0xff, 0xff, 0x03, 2)), "events"},
		{"exact negative time", base(exact(1, 1, 0)), "event time -1"},
		{"exact time overflows", base(exact(append([]byte{2}, binary.AppendUvarint(binary.AppendVarint(nil, 1<<62), 1<<63)...)...)), "overflows"},
		{"bad varint", base(frame(recKey, 1, 'k', 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)), "malformed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := New(Options{})
			defer r.Close()
			_, err := r.restoreBytes([]byte(c.data), t0)
			if !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want ErrSnapshot mentioning %q", err, c.want)
			}
			if r.Len() != 0 {
				t.Fatalf("%d keys held after a refused base", r.Len())
			}
		})
	}
	// Every prefix of a real base is refused.
	s := New(Options{})
	defer s.Close()
	fill(t, s, t0)
	full := s.encodeBytes(t, t0, true)
	for n := range len(full) {
		r := New(Options{})
		if _, err := r.restoreBytes(full[:n], t0); err == nil || r.Len() != 0 {
			t.Fatalf("a base cut to %d of %d bytes was accepted (%d keys)", n, len(full), r.Len())
		}
		r.Close()
	}
}

// TestRestoreMalformedLog: a record of the log cut short, corrupt or
// malformed ends the log there: the base and the records before it are
// used, the rest is reported as Cut, and the file is not clean.
func TestRestoreMalformedLog(t *testing.T) {
	exp := t0.Add(time.Hour).UnixNano()
	before := fileOf(keyRec("a", byte(limiter.Smooth), exp, exp), markRec(markBase, 1),
		keyRec("b", byte(limiter.Smooth), exp, exp), markRec(markClean, 1))
	r := New(Options{})
	defer r.Close()
	if st, err := r.restoreBytes(before, t0); err != nil || !st.Clean || st.Cut != 0 || r.Len() != 2 {
		t.Fatalf("the well-formed case: %+v %v", st, err)
	}
	del := frame(recDel, 'a')
	flip := func(b []byte, i int) []byte { b = bytes.Clone(b); b[i] ^= 0x40; return b }
	book := func(k booking) []byte { return appendBook(nil, k) }
	for _, c := range []struct {
		name string
		bad  []byte
	}{
		{"cut", del[:len(del)-1]},
		{"one byte", []byte{0}},
		{"checksum", flip(del, len(del)-1)},
		{"body", flip(del, 5)},
		{"length too long", append([]byte{0, 0, 0x7f, 0}, del[4:]...)},
		{"length zero", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"garbage", []byte("garbage garbage garbage")},
		{"unknown type", frame(9, 'a')},
		{"malformed key", frame(recKey, 5, 'a')},
		{"a base mark", markRec(markBase, 0)},
		{"booking of an even slot time", book(booking{seq: 1, key: "k", at: 2, n: 1, exp: exp})},
		{"booking of no events", book(booking{seq: 1, key: "k", at: 3, n: 0, exp: exp})},
		{"booking expiring before its slot", book(booking{seq: 1, key: "k", at: exp + 1, n: 1, exp: exp})},
		{"booking number 0", book(booking{key: "k", at: 3, n: 1, exp: exp})},
		{"booking with bytes after it", frame(recBook, append(appendBooking(nil, booking{seq: 1, key: "k", at: 3, n: 1, exp: exp}), 0)...)},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := New(Options{})
			defer r.Close()
			st, err := r.restoreBytes(cat(before, c.bad, del), t0)
			if err != nil || st.Clean || st.Cut != int64(len(c.bad)+len(del)) || r.Len() != 2 {
				t.Fatalf("%+v %v, Len %d: want both keys, not clean, %d bytes cut", st, err, r.Len(), len(c.bad)+len(del))
			}
		})
	}
}

// fixCRCs gives every record of data that has room for one the
// checksum it needs, so the fuzzer reaches the payload decoders.
func fixCRCs(data []byte) []byte {
	data = bytes.Clone(data)
	for off := headerLen; off+frameLen < len(data); {
		n := int(binary.BigEndian.Uint32(data[off:]))
		if n < 1 || n > len(data)-off-frameLen {
			break
		}
		binary.BigEndian.PutUint32(data[off+4+n:], crc32.Checksum(data[off+4:off+4+n], crcTable))
		off += n + frameLen
	}
	return data
}

// keyRecords returns a base's key records, sorted.
func keyRecords(t *testing.T, data []byte) []string {
	var out []string
	rr := &recordReader{r: bytes.NewReader(data), size: int64(len(data)), off: int64(headerLen)}
	for {
		typ, p, err := rr.next()
		if err != nil {
			t.Fatalf("re-encoded base: %v", err)
		}
		if typ != recKey {
			break
		}
		out = append(out, string(p))
	}
	slices.Sort(out)
	return out
}

// FuzzDecodeSnapshot: a restore of any bytes never panics and never
// allocates beyond its input's means; one that fails leaves the store
// empty and wraps ErrSnapshot; what one restores writes back as a base
// that restores the same keys. Each input is also tried with its records'
// checksums fixed, so the fuzzer reaches the payload decoders.
func FuzzDecodeSnapshot(f *testing.F) {
	s := New(Options{})
	defer s.Close()
	fill(f, s, t0)
	exp := t0.Add(time.Hour).UnixNano()
	f.Add(cat(s.encodeBytes(f, t0, false), frame(recDel, 'a'), appendBook(nil, booking{seq: 9, key: "r", at: 5, n: 2, exp: exp}),
		keyRec("k", byte(limiter.Smooth), exp, exp), markRec(markClean, 2)))
	f.Add(fileOf(markRec(markBase, 0)))
	f.Add([]byte(snapMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, in := range [][]byte{data, fixCRCs(data)} {
			r := New(Options{MaxKeys: 100})
			st, err := r.restoreBytes(in, t0)
			if err != nil {
				if !errors.Is(err, ErrSnapshot) || r.Len() != 0 {
					t.Fatalf("error %v, %d keys held", err, r.Len())
				}
				r.Close()
				continue
			}
			if st.Cut < 0 || st.Cut > int64(len(in)) || st.Keys != r.Len() {
				t.Fatalf("restored %+v of %d bytes, Len %d", st, len(in), r.Len())
			}
			again := r.encodeBytes(t, t0, false)
			r2 := New(Options{MaxKeys: 100})
			if _, err := r2.restoreBytes(again, t0); err != nil {
				t.Fatalf("the base written back: %v", err)
			}
			if a, b := keyRecords(t, again), keyRecords(t, r2.encodeBytes(t, t0, false)); !slices.Equal(a, b) {
				t.Fatalf("round trip:\n%q\n%q", a, b)
			}
			r.Close()
			r2.Close()
		}
	})
}
