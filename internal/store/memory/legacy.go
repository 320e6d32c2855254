package memory

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"time"

	"sluice/internal/safefs"
)

// The format before (version 1) kept three files: the base at path
// ("SLUICEMS", version 1, flags uint16, taken int64; records each a tag
// (1: a key, as a key record's payload; 0: the end, the record count and
// the highest booking number, uvarints); a CRC-32C of all before it),
// its change log at path+".changes" ("SLUICEMC", version 1, the base's
// taken time and checksum; segments each a body length uint32, the body
// and its CRC-32C; a body is flags, taken, then records as the base's,
// tag 2 a key length and key that holds nothing any more, and the end)
// and the booking journal at path+".bookings" ("SLUICEBJ", version 1;
// records each a body length uvarint, a book record's payload and its
// CRC-32C). A host upgraded from it restores them once; its first write
// replaces the base with a file of version 2 and removes the other two.
const (
	v1HeaderLen  = len(snapMagic) + 2 + 2 + 8
	v1ChangesLen = len("SLUICEMC") + 2 + 8 + 4
	tagEnd       = 0
	tagRate      = 1
	tagDel       = 2
)

// restoreLegacy reads the three files of version 1 (Restore).
func (s *Store) restoreLegacy(f io.ReaderAt, size int64, path string, limit int64, now time.Time) (SnapStats, error) {
	nowNs := now.UnixNano()
	var rp replay
	sum, err := s.restoreV1Base(f, size, &rp, nowNs)
	if err == nil {
		err = s.restoreV1Changes(path, limit, sum, &rp, nowNs)
	}
	if err == nil {
		err = readV1Journal(path, limit, &rp)
	}
	if err == nil {
		err = s.replayBookings(&rp, nowNs)
	}
	if err != nil {
		s.reset()
		return SnapStats{}, err
	}
	rp.st.Converted = true
	return rp.st, nil
}

// restoreV1Base reads a base of version 1 whole, once its checksum (read
// a window at a time) holds, and returns the checksum.
func (s *Store) restoreV1Base(f io.ReaderAt, size int64, rp *replay, nowNs int64) (uint32, error) {
	if size < int64(v1HeaderLen+3+4) {
		return 0, fmt.Errorf("%w: truncated (%d bytes)", ErrSnapshot, size)
	}
	rr := &recordReader{r: f, size: size}
	sum := uint32(0)
	for off := int64(0); off < size-4; off += window {
		b, err := rr.bytesAt(off, int(min(window, size-4-off)))
		if err != nil {
			return 0, err
		}
		sum = crc32.Update(sum, crcTable, b)
	}
	trailer, err := rr.bytesAt(size-4, 4)
	if err != nil {
		return 0, err
	}
	if sum != binary.BigEndian.Uint32(trailer) {
		return 0, fmt.Errorf("%w: checksum mismatch (truncated or corrupt)", ErrSnapshot)
	}
	data := make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil {
		return 0, err
	}
	flags := binary.BigEndian.Uint16(data[10:])
	rp.st.Taken, rp.st.Clean = timeOf(int64(binary.BigEndian.Uint64(data[12:]))), flags&markClean != 0
	d := snapDecoder{b: data[v1HeaderLen : size-4], alias: true}
	n := uint64(0)
	for {
		tag := d.byte()
		if tag == tagEnd || d.err != nil {
			break
		}
		if tag != tagRate {
			return 0, fmt.Errorf("%w: unknown record tag %d", ErrSnapshot, tag)
		}
		e, err := d.entry()
		if err != nil {
			return 0, err
		}
		n++
		if e.Exp <= nowNs || s.Len() >= s.opts.MaxKeys {
			rp.st.Dropped++
			continue
		}
		added, err := s.restoreOne(&e, false)
		if err == nil && !added {
			err = fmt.Errorf("%w: key %s appears twice", ErrSnapshot, quoteKey(e.Key))
		}
		if err != nil {
			return 0, err
		}
	}
	if cnt := d.uvarint(); cnt != n {
		return 0, fmt.Errorf("%w: %d records, the end record says %d", ErrSnapshot, n, cnt)
	}
	rp.seq = d.uvarint()
	if err := d.end("end record"); err != nil {
		return 0, err
	}
	return sum, nil
}

// readV1 reads the file at path whole, at most limit bytes, opened as
// the base is; nil when there is none.
func readV1(path string, limit int64, magic string) ([]byte, error) {
	f, err := safefs.OpenState(path, limit)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) < len(magic)+2 || string(data[:len(magic)]) != magic || binary.BigEndian.Uint16(data[len(magic):]) != 1 {
		return nil, fmt.Errorf("%w: %s: not a sluice file of version 1", ErrSnapshot, path)
	}
	return data, nil
}

// restoreV1Changes applies the change log of the base whose checksum is
// sum, up to its first segment cut short or corrupt; a log of another
// base is ignored.
func (s *Store) restoreV1Changes(path string, limit int64, sum uint32, rp *replay, nowNs int64) error {
	data, err := readV1(path+".changes", limit, "SLUICEMC")
	if data == nil || err != nil {
		return err
	}
	if len(data) < v1ChangesLen || binary.BigEndian.Uint64(data[10:]) != uint64(rp.st.Taken.UnixNano()) || binary.BigEndian.Uint32(data[18:]) != sum {
		return nil // the log of an older base
	}
	r := data[v1ChangesLen:]
	for len(r) >= 8 {
		l := uint64(binary.BigEndian.Uint32(r))
		if l < 10 || l > uint64(len(r)-8) || crc32.Checksum(r[4:4+l], crcTable) != binary.BigEndian.Uint32(r[4+l:]) {
			break
		}
		body := r[4 : 4+l]
		r = r[8+l:]
		d := snapDecoder{b: body[9:]}
		for d.err == nil {
			switch tag := d.byte(); {
			case d.err != nil:
			case tag == tagEnd:
				d.uvarint()
				rp.seq = max(rp.seq, d.uvarint())
				rp.st.Taken, rp.st.Clean = timeOf(int64(binary.BigEndian.Uint64(body[1:]))), body[0]&markClean != 0
				d.err = io.EOF
			case tag == tagDel:
				s.forget(d.key())
			case tag == tagRate:
				e, err := d.entry()
				if err != nil {
					return err
				}
				if e.Exp <= nowNs {
					s.forget(e.Key)
				} else if _, err := s.restoreOne(&e, true); err != nil {
					rp.st.Dropped++
				}
			default:
				d.err = fmt.Errorf("unknown record tag %d", tag)
			}
		}
		if d.err != io.EOF {
			return nil
		}
	}
	if len(r) != 0 {
		rp.st.Clean = false
	}
	return nil
}

// readV1Journal adds the journal's bookings, up to its first record cut
// short or corrupt, to those to replay.
func readV1Journal(path string, limit int64, rp *replay) error {
	data, err := readV1(path+".bookings", limit, "SLUICEBJ")
	if data == nil || err != nil {
		return err
	}
	for r := data[len("SLUICEBJ")+2:]; len(r) > 0; {
		l, n := binary.Uvarint(r)
		if n <= 0 || l > maxKeyLen+64 || uint64(len(r)-n) < l+4 || crc32.Checksum(r[n:n+int(l)], crcTable) != binary.BigEndian.Uint32(r[n+int(l):]) {
			break
		}
		d := snapDecoder{b: r[n : n+int(l)]}
		k, err := d.booking()
		if err != nil {
			break
		}
		rp.seq = max(rp.seq, k.seq)
		rp.pending = append(rp.pending, k)
		r = r[n+int(l)+4:]
	}
	return nil
}

// removeLegacy removes the change log and the booking journal of the
// format before, once a base of this one holds what they held.
func removeLegacy(path string) {
	os.Remove(path + ".changes")
	os.Remove(path + ".bookings")
}
