package memory

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The store's large arrays (records, index, key bytes) live in anonymous
// memory mappings, outside the Go heap: the collector neither scans them
// nor counts them towards its next goal, so a million keys add nothing to
// a collection's work and nothing to the heap growth the collector allows
// (GOGC) on top of the live heap. Pages of a mapping become resident only
// when written, so a mapping's unused tail costs address space, not
// memory. Every mapping is owned by one shard and replaced (grown) or
// released under its lock; the store's cleanup releases them when the
// store itself is unreachable.

// pageSize is the granule mappings are sized in.
var pageSize = unix.Getpagesize()

// mapBytes returns n bytes (rounded up to pages) of zeroed private
// anonymous memory.
func mapBytes(n int) ([]byte, error) {
	n = (n + pageSize - 1) / pageSize * pageSize
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("memory store: mapping %d bytes: %w", n, err)
	}
	return b, nil
}

// unmapBytes releases a mapping made by mapBytes (nil is ignored).
func unmapBytes(b []byte) {
	if cap(b) > 0 {
		_ = unix.Munmap(b[:cap(b)])
	}
}

// mapped is one typed array in a mapping: the records, or the index.
type mapped[T any] struct {
	raw []byte // the mapping
	s   []T    // raw seen as Ts, len = capacity
}

// alloc replaces m with a new mapping of n zeroed elements holding a copy
// of the first keep elements of the old one, which it releases.
func (m *mapped[T]) alloc(n, keep int) error {
	var zero T
	raw, err := mapBytes(n * int(unsafe.Sizeof(zero)))
	if err != nil {
		return err
	}
	s := unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(raw))), len(raw)/int(unsafe.Sizeof(zero)))
	copy(s, m.s[:keep])
	m.free()
	m.raw, m.s = raw, s
	return nil
}

// grow makes m hold n elements, keeping all it holds: the kernel moves
// the pages (mremap), nothing is copied. It falls back to alloc.
func (m *mapped[T]) grow(n int) error {
	var zero T
	size := (n*int(unsafe.Sizeof(zero)) + pageSize - 1) / pageSize * pageSize
	if m.raw == nil || size <= len(m.raw) {
		return m.alloc(n, len(m.s))
	}
	raw, err := unix.Mremap(m.raw, size, unix.MREMAP_MAYMOVE)
	if err != nil {
		return m.alloc(n, len(m.s))
	}
	m.raw = raw
	m.s = unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(raw))), len(raw)/int(unsafe.Sizeof(zero)))
	return nil
}

// free releases the mapping.
func (m *mapped[T]) free() {
	unmapBytes(m.raw)
	m.raw, m.s = nil, nil
}
