package redis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"sluice/internal/limiter"
)

// leaseRec is a lease this store holds.
type leaseRec struct {
	rkey   string
	member string
	// renew: acquired without a TTL, so renewed until released. Otherwise
	// it ends by itself and is forgotten after until (local time).
	renew bool
	until time.Time
}

// orphan is a lease whose acquisition had an unknown outcome (the call
// timed out): it may be held, so the background loop releases it.
type orphan struct {
	rkey, member string
	until        time.Time
}

// member is a lease's name in its sorted set. IDs are random, so hosts
// need not agree on a sequence; the script refuses a name already taken
// and Acquire draws again.
func (s *Store) member(id uint64) string {
	return strconv.FormatUint(id, 10) + "@" + s.opts.Owner
}

func ttlMicros(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// Acquire implements limiter.Store. A lease without TTL (ttl <= 0) gets
// Options.LeaseTTL in Redis, renewed until it is released.
func (s *Store) Acquire(ctx context.Context, now time.Time, key string, capacity int64, ttl time.Duration) (limiter.Lease, int64, bool, error) {
	renew := ttl <= 0
	if renew {
		ttl = s.opts.LeaseTTL
	}
	rk := s.rkey(key)
	for range 4 {
		id := rand.Uint64()
		if id == 0 {
			continue
		}
		m := s.member(id)
		args, err := s.timeArgs(now, make([]string, 0, 5))
		if err != nil {
			return limiter.Lease{}, 0, false, err
		}
		args = append(args, itoa(capacity), itoa(ttlMicros(ttl)), m)
		v, t1, err := s.eval(ctx, "acquire", acquireScript, []string{rk}, args)
		if err != nil {
			if _, ok := serverError(err); !ok && !errors.Is(err, ErrCircuitOpen) {
				// The script may have run: make sure the slot comes back.
				// (With the circuit open it was never sent.)
				s.mu.Lock()
				s.orphans = append(s.orphans, orphan{rk, m, time.Now().Add(ttl)})
				s.mu.Unlock()
			}
			return limiter.Lease{}, 0, false, err
		}
		if len(v) != 5 {
			return limiter.Lease{}, 0, false, s.malformed("acquire", v)
		}
		s.keyDelta.Add(v[2])
		s.clock(v[3], v[4], t1)
		switch v[0] {
		case 0:
			return limiter.Lease{}, v[1], false, nil
		case 1:
			l := limiter.Lease{Key: key, ID: id}
			s.mu.Lock()
			s.leases[l] = leaseRec{rkey: rk, member: m, renew: renew, until: time.Now().Add(ttl)}
			s.mu.Unlock()
			return l, v[1], true, nil
		}
	}
	s.errs.Add(1)
	return limiter.Lease{}, 0, false, errors.New("redis store: acquire: no free lease id after 4 draws")
}

// Release implements limiter.Store.
func (s *Store) Release(ctx context.Context, now time.Time, l limiter.Lease) (int64, error) {
	s.mu.Lock()
	delete(s.leases, l)
	s.mu.Unlock()
	return s.release(ctx, now, s.rkey(l.Key), s.member(l.ID), strconv.FormatUint(l.ID, 10)+"@", true)
}

func (s *Store) release(ctx context.Context, now time.Time, rk, member, idPrefix string, callerTime bool) (int64, error) {
	var args []string
	if callerTime {
		var err error
		if args, err = s.timeArgs(now, make([]string, 0, 4)); err != nil {
			return 0, err
		}
	} else {
		args = s.nowArgs(make([]string, 0, 4))
	}
	args = append(args, member, idPrefix)
	v, t1, err := s.eval(ctx, "release", releaseScript, []string{rk}, args)
	if err != nil {
		return 0, err
	}
	if len(v) != 4 {
		return 0, s.malformed("release", v)
	}
	s.keyDelta.Add(v[1])
	s.clock(v[2], v[3], t1)
	return v[0], nil
}

// Held implements limiter.Store.
func (s *Store) Held(ctx context.Context, now time.Time, key string) (int64, error) {
	args, err := s.timeArgs(now, make([]string, 0, 2))
	if err != nil {
		return 0, err
	}
	v, t1, err := s.eval(ctx, "held", heldScript, []string{s.rkey(key)}, args)
	if err != nil {
		return 0, err
	}
	if len(v) != 4 {
		return 0, s.malformed("held", v)
	}
	s.clock(v[2], v[3], t1)
	return v[0], nil
}

// parallel runs fn over items, a few at a time (the client pipelines them).
func parallel[T any](items []T, fn func(T)) {
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, it := range items {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(it)
		})
	}
	wg.Wait()
}

// renewAll extends every lease held without TTL, one script per key.
func (s *Store) renewAll() {
	type group struct {
		rkey   string
		leases []limiter.Lease
	}
	s.mu.Lock()
	byKey := make(map[string]*group)
	var groups []*group
	for l, r := range s.leases {
		if !r.renew {
			continue
		}
		g := byKey[r.rkey]
		if g == nil {
			g = &group{rkey: r.rkey}
			byKey[r.rkey] = g
			groups = append(groups, g)
		}
		g.leases = append(g.leases, l)
	}
	s.mu.Unlock()
	parallel(groups, func(g *group) {
		args := s.nowArgs(make([]string, 0, 3+len(g.leases)))
		args = append(args, itoa(ttlMicros(s.opts.LeaseTTL)))
		for _, l := range g.leases {
			args = append(args, s.member(l.ID))
		}
		v, _, err := s.eval(s.bg, "renewing leases", renewScript, []string{g.rkey}, args)
		if err != nil {
			s.warn("redis store: lease renewal failed; leases end at their TTL if it keeps failing", err)
			return
		}
		if len(v) < 2 {
			return
		}
		for _, pos := range v[2:] {
			if pos < 1 || int(pos) > len(g.leases) {
				continue
			}
			l := g.leases[pos-1]
			s.mu.Lock()
			_, held := s.leases[l]
			delete(s.leases, l)
			s.mu.Unlock()
			if held {
				s.errs.Add(1)
				s.log.Warn("redis store: a lease expired before it could be renewed; its slot may be given to another",
					"key", l.Key, "lease_ttl", s.opts.LeaseTTL.String())
			}
		}
	})
}

// releaseOrphans releases leases whose acquisition had an unknown outcome.
func (s *Store) releaseOrphans(now time.Time) {
	s.mu.Lock()
	pending := s.orphans
	s.orphans = nil
	s.mu.Unlock()
	if len(pending) == 0 {
		return
	}
	var mu sync.Mutex
	var keep []orphan
	parallel(pending, func(o orphan) {
		if now.After(o.until) {
			return
		}
		if _, err := s.release(s.bg, now, o.rkey, o.member, o.member, false); err != nil {
			mu.Lock()
			keep = append(keep, o)
			mu.Unlock()
		}
	})
	s.mu.Lock()
	s.orphans = append(s.orphans, keep...)
	s.mu.Unlock()
}

// releaseAll releases every lease this store still holds (on Close).
func (s *Store) releaseAll() error {
	type rel struct{ rkey, member string }
	s.mu.Lock()
	var all []rel
	now := time.Now()
	for _, r := range s.leases {
		if r.renew || now.Before(r.until) {
			all = append(all, rel{r.rkey, r.member})
		}
	}
	for _, o := range s.orphans {
		if now.Before(o.until) {
			all = append(all, rel{o.rkey, o.member})
		}
	}
	clear(s.leases)
	s.orphans = nil
	s.mu.Unlock()
	var mu sync.Mutex
	var errs []error
	parallel(all, func(r rel) {
		if _, err := s.release(context.Background(), now, r.rkey, r.member, r.member, false); err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	})
	if len(errs) > 0 {
		return fmt.Errorf("redis store: releasing %d of %d leases on close (they end at their TTL): %w", len(errs), len(all), errors.Join(errs...))
	}
	return nil
}
