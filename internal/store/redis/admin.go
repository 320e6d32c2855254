package redis

import (
	"context"
	"strings"
	"time"
)

// Keys implements limiter.Store: a SCAN of every primary for both forms
// of the keys under prefix (see rkey), read back as limiter keys.
func (s *Store) Keys(ctx context.Context, _ time.Time, prefix string, max int) ([]string, error) {
	var out []string
	for _, form := range []string{"#", "{"} {
		raw, err := s.c.listKeys(ctx, globPattern(s.prefix+form+prefix), max-len(out))
		if err != nil {
			return out, s.fail("keys", err)
		}
		for _, rk := range raw {
			k := strings.TrimPrefix(rk, s.prefix+form)
			if form == "{" {
				k = strings.TrimSuffix(k, "}")
			}
			out = append(out, k)
		}
		if len(out) >= max {
			break
		}
	}
	return out, nil
}

// Forget implements limiter.Store: the keys are deleted in Redis, for
// every daemon sharing it.
func (s *Store) Forget(ctx context.Context, _ time.Time, keys []string) (int, error) {
	rks := make([]string, len(keys))
	for i, k := range keys {
		rks[i] = s.rkey(k)
	}
	n, err := s.c.del(ctx, rks)
	s.keyDelta.Add(-n)
	if err != nil {
		return int(n), s.fail("forget", err)
	}
	return int(n), nil
}
