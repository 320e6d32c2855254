package memory

import (
	"io"
	"time"
)

// EncodeSnapshot writes snap in the snapshot format, as the store writes
// its own copy (encode).
func EncodeSnapshot(w io.Writer, snap *Snapshot) error {
	sw := newSnapWriter(w, snap.Taken, snap.Clean)
	for i := range snap.Entries {
		sw.entry(&snap.Entries[i])
	}
	return sw.finish(snap.Seq)
}

// Encode is encode, returning the number of keys written.
func (s *Store) Encode(w io.Writer, taken time.Time, clean bool) (int, error) {
	st, err := s.encode(w, taken, clean)
	return st.Keys, err
}
