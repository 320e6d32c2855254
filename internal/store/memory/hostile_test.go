package memory

import (
	"errors"
	"os"
	"path/filepath"
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
