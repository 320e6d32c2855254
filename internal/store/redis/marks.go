package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"sluice/internal/limiter"
)

// Marks are per-key control marks (limiter.Marks) in Redis, shared by
// every daemon on it: one hash per mark, PREFIX "mark:" NAME ":" KEY, with
// fields v (the value), s and e (since and expires, Unix ms; e 0: none),
// expiring with the mark (PEXPIREAT). They are plain keys apart from the
// limiter's scripts: each call touches one key.
type Marks struct {
	c      rueidis.Client
	prefix string
}

// Marks returns the store's marks, or nil when its connection is not a
// Redis client (a test's fake).
func (s *Store) Marks() *Marks {
	rc, ok := s.c.(rconn)
	if !ok {
		return nil
	}
	return &Marks{c: rc.c, prefix: s.prefix + "mark:"}
}

var (
	markPut = rueidis.NewLuaScript(`
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'v', ARGV[1], 's', ARGV[2], 'e', ARGV[3])
if ARGV[3] ~= '0' then redis.call('PEXPIREAT', KEYS[1], ARGV[3]) end
return 1`)
	markAdd = rueidis.NewLuaScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 's', ARGV[2], 'e', ARGV[3])
if ARGV[3] ~= '0' then redis.call('PEXPIREAT', KEYS[1], ARGV[3]) end
return 1`)
)

func (m *Marks) rkey(key, name string) string { return m.prefix + name + ":" + key }

func ms(t time.Time) string {
	if t.IsZero() {
		return "0"
	}
	return strconv.FormatInt(t.UnixMilli(), 10)
}

func fromMs(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

func markArgs(m limiter.Mark) []string {
	return []string{strconv.FormatInt(m.Value, 10), ms(m.Since), ms(m.Expires)}
}

// Get implements limiter.Marks.
func (m *Marks) Get(ctx context.Context, key, name string) (limiter.Mark, bool, error) {
	return m.get(ctx, m.rkey(key, name))
}

func (m *Marks) get(ctx context.Context, rk string) (limiter.Mark, bool, error) {
	vals, err := m.c.Do(ctx, m.c.B().Hmget().Key(rk).Field("v", "s", "e").Build()).ToArray()
	if err != nil {
		return limiter.Mark{}, false, fmt.Errorf("redis marks: HMGET %s: %w", rk, err)
	}
	var n [3]int64
	for i, v := range vals {
		s, err := v.ToString()
		if err != nil {
			return limiter.Mark{}, false, nil // absent (or expired)
		}
		if n[i], err = strconv.ParseInt(s, 10, 64); err != nil {
			return limiter.Mark{}, false, fmt.Errorf("redis marks: %s holds %q", rk, s)
		}
	}
	mk := limiter.Mark{Value: n[0], Since: fromMs(n[1]), Expires: fromMs(n[2])}
	return mk, mk.Live(time.Now()), nil
}

// Put implements limiter.Marks.
func (m *Marks) Put(ctx context.Context, key, name string, mk limiter.Mark) error {
	if err := markPut.Exec(ctx, m.c, []string{m.rkey(key, name)}, markArgs(mk)).Error(); err != nil {
		return fmt.Errorf("redis marks: set %s %s: %w", key, name, err)
	}
	return nil
}

// Add implements limiter.Marks.
func (m *Marks) Add(ctx context.Context, key, name string, mk limiter.Mark) (bool, error) {
	n, err := markAdd.Exec(ctx, m.c, []string{m.rkey(key, name)}, markArgs(mk)).AsInt64()
	if err != nil {
		return false, fmt.Errorf("redis marks: add %s %s: %w", key, name, err)
	}
	return n == 1, nil
}

// Delete implements limiter.Marks.
func (m *Marks) Delete(ctx context.Context, key, name string) error {
	if err := m.c.Do(ctx, m.c.B().Del().Key(m.rkey(key, name)).Build()).Error(); err != nil {
		return fmt.Errorf("redis marks: delete %s %s: %w", key, name, err)
	}
	return nil
}

// List implements limiter.Marks: SCAN of the marks' prefix on every node
// (at most limiter.MaxMarks).
func (m *Marks) List(ctx context.Context) ([]limiter.KeyMark, error) {
	var out []limiter.KeyMark
	for addr, n := range m.c.Nodes() {
		var cursor uint64
		for {
			e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(globPattern(m.prefix)).Count(1000).Build()).AsScanEntry()
			if err != nil {
				return nil, fmt.Errorf("redis marks: SCAN on %s: %w", addr, err)
			}
			for _, rk := range e.Elements {
				name, key, ok := strings.Cut(strings.TrimPrefix(rk, m.prefix), ":")
				if !ok || len(out) >= limiter.MaxMarks {
					continue
				}
				mk, live, err := m.get(ctx, rk)
				if err != nil {
					return nil, err
				}
				if live {
					out = append(out, limiter.KeyMark{Key: key, Name: name, Mark: mk})
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	slices.SortFunc(out, func(a, b limiter.KeyMark) int {
		return strings.Compare(a.Key+"\x00"+a.Name, b.Key+"\x00"+b.Name)
	})
	return slices.CompactFunc(out, func(a, b limiter.KeyMark) bool { return a.Key == b.Key && a.Name == b.Name }), nil
}

// Shared implements limiter.Marks: every daemon on this Redis sees them.
func (m *Marks) Shared() bool { return true }
