package memory

import (
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

// TestReadSnapshotRefusesHostileFiles: a store file that is a symbolic link, a FIFO, a directory, a device or a file larger than what
// the store could hold is refused with one error, at once: nothing is
// followed, waited on or read whole. A huge file with the wrong magic
// costs a 14-byte read, not its size.
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
			r := New(Options{})
			defer r.Close()
			if _, err := r.Restore(p, limit, t0); !errors.Is(err, c.want) {
				t.Errorf("%v, want %v", err, c.want)
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
	r := New(Options{})
	defer r.Close()
	data := []byte("NOTSLUICE-and-then-some-more-bytes")
	_, _, err := r.restoreFrom(&failAfter{data: data, n: headerLen}, int64(len(data)), t0)
	if !errors.Is(err, ErrSnapshot) {
		t.Errorf("%v, want bad magic", err)
	}
}

// failAfter serves the first n bytes of data, then fails the test's read.
type failAfter struct {
	data []byte
	n    int
}

var errReadPast = errors.New("read past the header")

func (f *failAfter) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > int64(f.n) {
		return 0, errReadPast
	}
	return copy(p, f.data[off:]), nil
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

// TestRestoreBoundedByRecords: a store file with a valid header is read
// a record at a time, each only once its length fits the file: files of
// 1 GiB (sparse) under the default store's cap (10,000,000 keys: a
// 20 GiB limit) holding zeros, a huge or lying length field, a real
// file with 1 GiB of junk after it, and one of format version 1 are each
// refused (or their junk dropped) after allocating less than 1 MiB, and a
// record of 20 MiB with a bad checksum after allocating it: the file is
// never read whole.
func TestRestoreBoundedByRecords(t *testing.T) {
	const big = 1 << 30
	s := New(Options{})
	defer s.Close()
	fill(t, s, t0)
	real := s.encodeBytes(t, t0, true)
	length := func(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }
	limit := SnapshotLimit(10_000_000)
	cases := []struct {
		name string
		head []byte // the file's first bytes; zeros follow, to size
		size int64
		want string // "" for a file whose junk is dropped
	}{
		{"zeros after the header", appendHeader(nil, 1<<31), big, "record length 0"},
		{"a huge length", cat(appendHeader(nil, 0), length(1<<32-1)), big, "record length 4294967295"},
		{"a length past maxBody", cat(appendHeader(nil, 0), length(maxBody+1)), big, "record length"},
		// A length that fits the file is read: at most maxBody bytes.
		{"a record of 20 MiB, checksum bad", cat(appendHeader(nil, 0), length(20<<20), []byte{recKey}), big, "checksum mismatch"},
		{"a real file, 1 GiB of zeros after it", real, int64(len(real)) + big, ""},
		{"a file of format version 1", []byte("SLUICEMS\x00\x01\x00\x00"), big, "format version 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "store.snapshot")
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(c.head); err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(c.size); err != nil {
				t.Fatal(err)
			}
			f.Close()
			r := New(Options{})
			defer r.Close()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			st, err := r.Restore(p, limit, t0)
			runtime.ReadMemStats(&after)
			switch {
			case c.want == "" && (err != nil || st.Cut != big || r.Len() != 4):
				t.Errorf("%+v %v, Len %d: want the real file's keys and 1 GiB cut", st, err, r.Len())
			case c.want != "" && (!errors.Is(err, ErrSnapshot) || !strings.Contains(err.Error(), c.want)):
				t.Errorf("error %v, want ErrSnapshot mentioning %q", err, c.want)
			}
			bound := uint64(1 << 20)
			if strings.Contains(c.name, "20 MiB") {
				bound += maxBody
			}
			if n := after.TotalAlloc - before.TotalAlloc; n >= bound {
				t.Errorf("reading a file of %d bytes allocated %d bytes", c.size, n)
			}
		})
	}
}
