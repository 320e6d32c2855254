package memory

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"sluice/internal/safefs"
)

// testMaxKeys is the store cap the tests size snapshot reads by.
const testMaxKeys = 100000

// TestReadSnapshotRefusesHostileFiles: a snapshot or journal path that is
// a symbolic link, a FIFO, a directory, a device or a file larger than
// what the store could hold is refused with one error, at once: nothing
// is followed, waited on or read whole. A huge file with the wrong magic
// costs a 16-byte read, not its size.
func TestReadSnapshotRefusesHostileFiles(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("SLUICEMS not yours"), 0o600); err != nil {
		t.Fatal(err)
	}
	limit := SnapshotLimit(10)
	cases := []struct {
		name string
		make func(path string) error
		want error
	}{
		{"symlink", func(p string) error { return os.Symlink(secret, p) }, safefs.ErrNotRegular},
		{"symlink to /dev/zero", func(p string) error { return os.Symlink("/dev/zero", p) }, safefs.ErrNotRegular},
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o600) }, safefs.ErrNotRegular},
		{"directory", func(p string) error { return os.Mkdir(p, 0o700) }, safefs.ErrNotRegular},
		{"device", func(p string) error { return syscall.Mknod(p, syscall.S_IFCHR|0o600, 1<<8|5) }, safefs.ErrNotRegular}, // /dev/zero's numbers
		{"sparse, over the limit", func(p string) error { return sparse(p, limit+1) }, safefs.ErrTooLarge},
		{"sparse, bad magic", func(p string) error { return sparse(p, limit) }, ErrSnapshot},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "store.snapshot")
			if err := c.make(p); err != nil {
				if c.name == "device" {
					t.Skipf("mknod needs root: %v", err) // the device case is run by root in CI
				}
				t.Fatal(err)
			}
			_, err := ReadSnapshot(p, limit)
			if !errors.Is(err, c.want) {
				t.Errorf("snapshot: %v, want %v", err, c.want)
			}
			_, err = ReadJournal(p, limit)
			if c.want == ErrSnapshot {
				if !errors.Is(err, ErrJournal) {
					t.Errorf("journal: %v, want %v", err, ErrJournal)
				}
			} else if !errors.Is(err, c.want) {
				t.Errorf("journal: %v, want %v", err, c.want)
			}
		})
	}
	if b, _ := os.ReadFile(secret); string(b) != "SLUICEMS not yours" {
		t.Errorf("the link's target changed: %q", b)
	}
}

// TestReadSnapshotChecksMagicFirst: the magic is judged on the first
// bytes, before the rest is read (a reader that fails past them proves
// it).
func TestReadSnapshotChecksMagicFirst(t *testing.T) {
	r := &failAfter{data: []byte("NOTSLUICE-and-then-some-more-bytes"), n: headerLen}
	if _, err := ReadSnapshotFile(r, 1<<30); !errors.Is(err, ErrSnapshot) {
		t.Errorf("snapshot: %v, want bad magic", err)
	}
	r = &failAfter{data: []byte("NOTAJOURNAL-and-more"), n: len(journalMagic)}
	if _, err := ReadJournalFile(r, 1<<30); !errors.Is(err, ErrJournal) {
		t.Errorf("journal: %v, want bad magic", err)
	}
}

// failAfter serves n bytes of data, then fails the test's read.
type failAfter struct {
	data []byte
	n    int
	off  int
}

var errReadPast = errors.New("read past the header")

func (f *failAfter) Read(p []byte) (int, error) {
	if f.off >= f.n {
		return 0, errReadPast
	}
	k := copy(p, f.data[f.off:f.n])
	f.off += k
	return k, nil
}

func sparse(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// TestReadSnapshotBoundedByCount: a snapshot file with a valid magic is
// read only as far as the keys its end record counts allow. Files of
// 1 GiB (sparse) under the default store's cap (10,000,000 keys: a 10 GiB
// limit), whose end record is missing or counts keys their size does not
// fit, and a real snapshot cut short or with bytes appended, are each
// refused with ErrSnapshot after allocating less than 1 MiB: the file is
// never read whole.
func TestReadSnapshotBoundedByCount(t *testing.T) {
	const big = 1 << 30
	s := New(Options{})
	defer s.Close()
	fill(t, s, t0)
	var buf bytes.Buffer
	if _, err := s.Encode(&buf, t0, true); err != nil {
		t.Fatal(err)
	}
	real := buf.Bytes()
	limit := SnapshotLimit(10_000_000)
	cases := []struct {
		name string
		size int64  // the file's size: the header at its start, tail at its end, zeros between
		tail []byte // the last bytes
		want string
	}{
		{"zeros after the header", big, nil, "more than the 0 keys"},
		{"counts 1 key", big, cat(end(1), []byte{1, 2, 3, 4}), "more than the 1 keys"},
		{"counts 10 keys", big, cat(end(10), []byte{1, 2, 3, 4}), "more than the 10 keys"},
		{"counts more keys than it holds", big, cat(end(1<<40), []byte{1, 2, 3, 4}), "counts 1099511627776 keys, more than"},
		{"no end record", big, bytes.Repeat([]byte{0xff}, 30), "no end record"},
		{"a real snapshot cut short", int64(len(real) - 5), real[len(real)-30 : len(real)-5], "invalid store snapshot"},
		{"a real snapshot with a GiB appended", int64(len(real)) + big, cat(real[len(real)-20:], bytes.Repeat([]byte{0x80}, 20)), "no end record"},
		{"a real snapshot with its end record appended", int64(len(real)) + big, real[len(real)-20:], "more than the"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "store.snapshot")
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(header(1, 0)); err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(c.size); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(c.tail, c.size-int64(len(c.tail))); err != nil {
				t.Fatal(err)
			}
			f.Close()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err = ReadSnapshot(p, limit)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want ErrSnapshot mentioning %q", err, c.want)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n >= 1<<20 {
				t.Errorf("refusing a file of %d bytes allocated %d bytes", c.size, n)
			}
		})
	}
	// The real snapshot itself is read.
	p := filepath.Join(t.TempDir(), "store.snapshot")
	if err := os.WriteFile(p, real, 0o600); err != nil {
		t.Fatal(err)
	}
	if snap, err := ReadSnapshot(p, limit); err != nil || len(snap.Entries) == 0 {
		t.Fatalf("the real snapshot: %v", err)
	}
}

// FuzzEndRecord: the backward parse of a snapshot's end record never
// panics, and what it accepts is a tag 0 followed by the count it
// returns and one more uvarint, then the trailer, ending tail.
func FuzzEndRecord(f *testing.F) {
	f.Add(cat(end(1), []byte{1, 2, 3, 4}))
	f.Add(cat([]byte{7, 7}, endSeq(1<<40, 99), []byte{1, 2, 3, 4}))
	f.Add(bytes.Repeat([]byte{0x80}, maxTailLen))
	f.Add([]byte{0, 0, 0})
	f.Fuzz(func(t *testing.T, tail []byte) {
		if len(tail) > maxTailLen {
			tail = tail[len(tail)-maxTailLen:]
		}
		n, tailLen, ok := endRecord(tail)
		if !ok {
			return
		}
		if tailLen > len(tail) || tailLen < 3+trailerLen || tail[len(tail)-tailLen] != tagEnd {
			t.Fatalf("%x: tail length %d", tail, tailLen)
		}
		rec := tail[len(tail)-tailLen+1 : len(tail)-trailerLen]
		got, k := binary.Uvarint(rec)
		if k <= 0 || got != n {
			t.Fatalf("%x: count %d, the record says %d (%d)", tail, n, got, k)
		}
		if _, k2 := binary.Uvarint(rec[k:]); k2 != len(rec)-k {
			t.Fatalf("%x: the sequence number is not one uvarint to the trailer", tail)
		}
	})
}
