package limiter

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"sluice/internal/clock"
	"sluice/internal/safefs"
)

// Mark is a per-key control mark: a value set at Since that holds until
// Expires (zero: until deleted). The throttle's ban handling keeps a
// key's suspension, its ban streak and its learned limit as marks; an
// administrator's suspend, resume and exempt use the same.
type Mark struct {
	Value   int64
	Since   time.Time
	Expires time.Time
}

// Live says whether the mark still holds at now.
func (m Mark) Live(now time.Time) bool { return m.Expires.IsZero() || now.Before(m.Expires) }

// KeyMark is a mark with its key and name (Marks.List).
type KeyMark struct {
	Key, Name string
	Mark
}

// Marks holds per-key control marks with expiry: in memory (kept in a
// small file of the state directory) or in Redis, shared by every daemon
// using it. An expired mark reads as absent.
type Marks interface {
	// Get returns key's mark name, if one holds.
	Get(ctx context.Context, key, name string) (Mark, bool, error)
	// Put sets key's mark name.
	Put(ctx context.Context, key, name string, m Mark) error
	// Add sets key's mark name only if none holds, and says whether it did.
	Add(ctx context.Context, key, name string, m Mark) (bool, error)
	// Delete removes key's mark name.
	Delete(ctx context.Context, key, name string) error
	// List returns every mark that holds, sorted by key and name.
	List(ctx context.Context) ([]KeyMark, error)
	// Shared says whether other daemons see the same marks (their changes
	// are not announced: a daemon polls for them).
	Shared() bool
}

// Limits of the marks file and of one mark.
const (
	MaxMarks       = 1 << 16
	maxMarkKey     = 1024
	maxMarkName    = 64
	MarksFileLimit = 8 << 20
	marksMagic     = "SLUICEMK"
	marksVersion   = 1
)

// ErrMarks is wrapped by every error about a marks file's content.
var ErrMarks = errors.New("invalid marks file")

// MemoryMarks are marks held in memory and, when it has a path, written
// to that file (whole, atomically) at every change and read back at start.
type MemoryMarks struct {
	path string
	clk  clock.Clock
	mu   sync.Mutex
	m    map[[2]string]Mark
}

// NewMemoryMarks returns marks kept in the file at path ("": in memory
// only), reading what the file holds. The file must be a regular file
// reached without following a symbolic link (safefs), at most
// MarksFileLimit bytes, and start with the marks magic; a missing file is
// an empty set. clk tells the marks' expiry (nil: the real clock).
func NewMemoryMarks(path string, clk clock.Clock) (*MemoryMarks, error) {
	if clk == nil {
		clk = clock.Real{}
	}
	mm := &MemoryMarks{path: path, clk: clk, m: map[[2]string]Mark{}}
	if path == "" {
		return mm, nil
	}
	f, err := safefs.OpenState(path, MarksFileLimit)
	if errors.Is(err, os.ErrNotExist) {
		return mm, nil
	}
	if err != nil {
		return nil, fmt.Errorf("marks: %w", err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, fmt.Errorf("marks: read %s: %w", path, err)
	}
	list, err := DecodeMarks(buf.Bytes())
	if err != nil {
		return nil, fmt.Errorf("marks %s: %w", path, err)
	}
	t := clk.Now()
	for _, k := range list {
		if k.Live(t) {
			mm.m[[2]string{k.Key, k.Name}] = k.Mark
		}
	}
	return mm, nil
}

// Get implements Marks.
func (mm *MemoryMarks) Get(_ context.Context, key, name string) (Mark, bool, error) {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	m, ok := mm.m[[2]string{key, name}]
	if !ok || !m.Live(mm.clk.Now()) {
		return Mark{}, false, nil
	}
	return m, true, nil
}

// Put implements Marks.
func (mm *MemoryMarks) Put(_ context.Context, key, name string, m Mark) error {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	return mm.set(key, name, m)
}

// Add implements Marks.
func (mm *MemoryMarks) Add(_ context.Context, key, name string, m Mark) (bool, error) {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	if old, ok := mm.m[[2]string{key, name}]; ok && old.Live(mm.clk.Now()) {
		return false, nil
	}
	return true, mm.set(key, name, m)
}

// Delete implements Marks.
func (mm *MemoryMarks) Delete(_ context.Context, key, name string) error {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	k := [2]string{key, name}
	if _, ok := mm.m[k]; !ok {
		return nil
	}
	old := mm.m[k]
	delete(mm.m, k)
	if err := mm.write(); err != nil {
		mm.m[k] = old
		return err
	}
	return nil
}

// List implements Marks.
func (mm *MemoryMarks) List(context.Context) ([]KeyMark, error) {
	mm.mu.Lock()
	defer mm.mu.Unlock()
	return mm.live(), nil
}

// Shared implements Marks: memory marks are this daemon's own.
func (mm *MemoryMarks) Shared() bool { return false }

func (mm *MemoryMarks) live() []KeyMark {
	t := mm.clk.Now()
	out := make([]KeyMark, 0, len(mm.m))
	for k, m := range mm.m {
		if m.Live(t) {
			out = append(out, KeyMark{Key: k[0], Name: k[1], Mark: m})
		}
	}
	slices.SortFunc(out, func(a, b KeyMark) int {
		return strings.Compare(a.Key+"\x00"+a.Name, b.Key+"\x00"+b.Name)
	})
	return out
}

func (mm *MemoryMarks) set(key, name string, m Mark) error {
	if key == "" || len(key) > maxMarkKey || name == "" || len(name) > maxMarkName {
		return fmt.Errorf("marks: key or name empty or too long (%d, %d bytes)", len(key), len(name))
	}
	k := [2]string{key, name}
	old, had := mm.m[k]
	if !had && len(mm.m) >= MaxMarks {
		mm.prune()
		if len(mm.m) >= MaxMarks {
			return fmt.Errorf("marks: %d marks held, no room for %s %s", len(mm.m), key, name)
		}
	}
	mm.m[k] = m
	if err := mm.write(); err != nil {
		if had {
			mm.m[k] = old
		} else {
			delete(mm.m, k)
		}
		return err
	}
	return nil
}

func (mm *MemoryMarks) prune() {
	t := mm.clk.Now()
	for k, m := range mm.m {
		if !m.Live(t) {
			delete(mm.m, k)
		}
	}
}

// write rewrites the file: a temporary file in the same directory,
// synced, renamed over it.
func (mm *MemoryMarks) write() error {
	if mm.path == "" {
		return nil
	}
	mm.prune()
	data := EncodeMarks(mm.live())
	dir := filepath.Dir(mm.path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(mm.path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("marks: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, mm.path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("marks: write %s: %w", mm.path, err)
	}
	return nil
}

// The marks file (version 1): "SLUICEMK", version uint16 (big-endian),
// then per mark the key and the name (uvarint length and bytes), the
// value, since and expires (varints; times in Unix ns, 0 for none), and a
// CRC-32C of everything before it (uint32).

var marksCRC = crc32.MakeTable(crc32.Castagnoli)

// EncodeMarks writes marks in the file format.
func EncodeMarks(list []KeyMark) []byte {
	b := append([]byte(marksMagic), 0, marksVersion)
	ns := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.UnixNano()
	}
	for _, k := range list {
		b = binary.AppendUvarint(b, uint64(len(k.Key)))
		b = append(b, k.Key...)
		b = binary.AppendUvarint(b, uint64(len(k.Name)))
		b = append(b, k.Name...)
		b = binary.AppendVarint(b, k.Value)
		b = binary.AppendVarint(b, ns(k.Since))
		b = binary.AppendVarint(b, ns(k.Expires))
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, marksCRC))
}

// DecodeMarks reads the file format; anything malformed is an error
// wrapping ErrMarks.
func DecodeMarks(b []byte) ([]KeyMark, error) {
	head := len(marksMagic) + 2
	if len(b) < head+4 || string(b[:len(marksMagic)]) != marksMagic {
		return nil, fmt.Errorf("%w: not a sluice marks file", ErrMarks)
	}
	if v := binary.BigEndian.Uint16(b[len(marksMagic):]); v != marksVersion {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrMarks, v, marksVersion)
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, marksCRC) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrMarks)
	}
	r := body[head:]
	str := func(limit int) (string, bool) {
		n, k := binary.Uvarint(r)
		if k <= 0 || n == 0 || n > uint64(limit) || uint64(len(r)-k) < n {
			return "", false
		}
		s := string(r[k : k+int(n)])
		r = r[k+int(n):]
		return s, true
	}
	num := func() (int64, bool) {
		v, k := binary.Varint(r)
		if k <= 0 {
			return 0, false
		}
		r = r[k:]
		return v, true
	}
	tm := func(v int64) time.Time {
		if v == 0 {
			return time.Time{}
		}
		return time.Unix(0, v)
	}
	var out []KeyMark
	for len(r) > 0 {
		if len(out) == MaxMarks {
			return nil, fmt.Errorf("%w: more than %d marks", ErrMarks, MaxMarks)
		}
		key, ok1 := str(maxMarkKey)
		name, ok2 := str(maxMarkName)
		v, ok3 := num()
		since, ok4 := num()
		exp, ok5 := num()
		if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
			return nil, fmt.Errorf("%w: mark %d is truncated or too long", ErrMarks, len(out)+1)
		}
		out = append(out, KeyMark{Key: key, Name: name, Mark: Mark{Value: v, Since: tm(since), Expires: tm(exp)}})
	}
	return out, nil
}
