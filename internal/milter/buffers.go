package milter

import (
	"sync"

	"sluice/internal/milter/wire"
)

// Buffers: replies use small pooled buffers; payloads larger than rbuf
// use pooled 64 KiB buffers (a body chunk's size), or their own size
// above that.
var (
	bufPool     = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}
	payloadPool = sync.Pool{New: func() any { b := make([]byte, wire.MaxChunk+1); return &b }}
)

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte, used []byte) {
	if cap(used) <= 64<<10 {
		*b = used[:0]
		bufPool.Put(b)
	}
}
