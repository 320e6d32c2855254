package memory

import (
	"bytes"
	"testing"
	"time"
)

// encodeBytes is the base the store would write now (its dirty marks
// cleared, as a write clears them).
func (s *Store) encodeBytes(t testing.TB, now time.Time, clean bool) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, _, err := s.encodeBase(&b, now, clean); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// restoreBytes restores a file's bytes into the store, as Restore does.
func (s *Store) restoreBytes(data []byte, now time.Time) (SnapStats, error) {
	st, _, err := s.restoreFrom(bytes.NewReader(data), int64(len(data)), now)
	return st, err
}

// entriesOf decodes the base the store would write now, by key.
func (s *Store) entriesOf(t testing.TB, now time.Time) map[string]SnapEntry {
	t.Helper()
	data := s.encodeBytes(t, now, false)
	m := map[string]SnapEntry{}
	rr := &recordReader{r: bytes.NewReader(data), size: int64(len(data)), off: int64(headerLen)}
	for {
		typ, p, err := rr.next()
		if err != nil {
			t.Fatal(err)
		}
		if typ != recKey {
			return m
		}
		d := snapDecoder{b: p}
		e, err := d.entry()
		if err != nil {
			t.Fatal(err)
		}
		m[e.Key] = e
	}
}
