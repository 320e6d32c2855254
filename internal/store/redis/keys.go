package redis

import (
	"errors"
	"fmt"
	"strings"

	"sluice/internal/limiter"
)

// ErrCrossSlot is returned in Cluster mode when the keys of one call (the
// checks of a Hit, Peek or Undo) live in different hash slots, where no
// script can decide them atomically. Give such keys a common {hash tag}.
// It wraps limiter.ErrBadRequest: retrying cannot help.
var ErrCrossSlot = fmt.Errorf("redis store: the keys of one call are in different Redis Cluster slots; give them a common {hash tag}: %w", limiter.ErrBadRequest)

// Key layout. A limiter key K becomes one Redis key:
//
//	PREFIX{K}    when K has no hash tag of its own: K alone picks the slot;
//	PREFIX#K     when K contains a Redis hash tag ("{...}", non-empty):
//	             that tag picks the slot, so callers can keep related keys
//	             (the limits of one rule) on one Cluster slot.
//
// The two forms cannot collide ('{' or '#' after the prefix), and the
// prefix may hold neither brace, so it never takes part in the hash tag.
// Every kind of state uses the key itself (anvil: hash, exact: list,
// smooth: string, leases: sorted set); a key of another kind is dropped
// when written, as store/memory does.
func (s *Store) rkey(key string) string {
	if hasTag(key) {
		return s.prefix + "#" + key
	}
	return s.prefix + "{" + key + "}"
}

// ClusterSlot is the Redis Cluster hash slot (0-16383) that limiter key
// key is stored in, whatever the prefix (it holds no braces, so it never
// takes part in the hash tag). The keys of one Hit, Peek or Undo must
// share it in Cluster mode. Only tests call it: the governor's
// (TestPolicyKeysShareASlot checks with it that the keys of every policy
// decision share a slot, without copying this layout) and the store's.
func ClusterSlot(key string) uint16 {
	if hasTag(key) {
		return hashSlot("#" + key)
	}
	return hashSlot("{" + key + "}")
}

// hasTag reports whether key holds a Redis Cluster hash tag: a '{' followed
// later by a '}' with at least one byte between the first of each.
func hasTag(key string) bool {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return false
	}
	j := strings.IndexByte(key[i+1:], '}')
	return j > 0
}

// hashSlot is the Redis Cluster slot of a Redis key: CRC16 (XMODEM) of its
// hash tag, or of the whole key without one, modulo 16384.
func hashSlot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc & 16383
}

// sameSlot checks, in Cluster mode, that keys share one slot.
func (s *Store) sameSlot(keys []string) error {
	if !s.opts.Cluster || len(keys) < 2 {
		return nil
	}
	first := hashSlot(keys[0])
	for _, k := range keys[1:] {
		if hashSlot(k) != first {
			return ErrCrossSlot
		}
	}
	return nil
}

// globPattern is a SCAN MATCH pattern for every key under prefix.
func globPattern(prefix string) string {
	var b strings.Builder
	for _, r := range prefix {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	b.WriteByte('*')
	return b.String()
}

func checkPrefix(p string) error {
	if strings.ContainsAny(p, "{}") {
		return errors.New("redis store: KeyPrefix must not contain '{' or '}'")
	}
	return nil
}
