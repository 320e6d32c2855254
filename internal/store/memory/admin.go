package memory

import (
	"context"
	"strings"
	"time"
)

// Keys implements limiter.Store: the live keys under prefix, taking one
// shard's lock at a time.
func (s *Store) Keys(_ context.Context, now time.Time, prefix string, max int) ([]string, error) {
	nowNs := now.UnixNano()
	var out []string
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for j := 0; j < sh.n && len(out) < max; j++ {
			r := &sh.recs.s[j]
			if r.exp != 0 && r.exp <= nowNs {
				continue
			}
			if k := sh.key(j); len(k) >= len(prefix) && string(k[:len(prefix)]) == prefix {
				out = append(out, strings.Clone(string(k)))
			}
		}
		sh.mu.Unlock()
		if len(out) >= max {
			break
		}
	}
	return out, nil
}

// Forget implements limiter.Store: each key held is removed, and the
// removal reaches the next snapshot's change log as a deletion.
func (s *Store) Forget(_ context.Context, now time.Time, keys []string) (int, error) {
	nowNs := now.UnixNano()
	n := 0
	for _, key := range keys {
		h := s.hash(key)
		sh := s.shardOf(h)
		sh.mu.Lock()
		if i := sh.find(key, h); i >= 0 {
			if r := &sh.recs.s[i]; r.exp == 0 || r.exp > nowNs {
				n++
			}
			sh.markDirty(i) // remove notes a dirty rate key as gone
			sh.remove(i)
			s.n.Add(-1)
		}
		sh.mu.Unlock()
	}
	return n, nil
}
