package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"sluice/internal/limiter"
)

func exactCheck(key string, n int64, period time.Duration) limiter.Check {
	return limiter.Check{Key: key, Limit: limiter.Limit{Algorithm: limiter.Exact, N: n, Period: period}}
}

// A lease held by a host that dies (no release, no renewal) frees after
// LeaseTTL; a live host's lease outlives LeaseTTL by renewal; Close
// releases.
func TestLeaseOfDeadHostExpires(t *testing.T) {
	srv := needServer(t)
	const ttl = 2 * time.Second
	o := Options{KeyPrefix: fmt.Sprintf("dead%d:", prefixSeq.Add(1)), LeaseTTL: ttl}
	o.Owner = "dead-host"
	dead := newTestStore(t, srv, o)
	o.Owner = "live-host"
	live := newTestStore(t, srv, o)
	o.Owner = "third-host"
	third := newTestStore(t, srv, o)
	now := time.Now() // ignored: Redis TIME decides

	start := time.Now()
	if _, _, ok, err := dead.Acquire(ctx, now, "slot", 1, 0); !ok || err != nil {
		t.Fatalf("dead host's acquire: %v %v", ok, err)
	}
	if _, _, ok, err := live.Acquire(ctx, now, "kept", 1, 0); !ok || err != nil {
		t.Fatalf("live host's acquire: %v %v", ok, err)
	}
	crash(dead)
	if _, held, ok, err := live.Acquire(ctx, now, "slot", 1, 0); ok || held != 1 || err != nil {
		t.Fatalf("slot should be held by the dead host: ok %v held %d err %v", ok, held, err)
	}
	var freedAfter time.Duration
	for {
		_, _, ok, err := live.Acquire(ctx, now, "slot", 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			freedAfter = time.Since(start)
			break
		}
		if time.Since(start) > 10*ttl {
			t.Fatalf("the dead host's lease is still held after %s (LeaseTTL %s)", time.Since(start), ttl)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if freedAfter < ttl-50*time.Millisecond {
		t.Fatalf("lease freed after %s, before its TTL %s", freedAfter, ttl)
	}
	// By now the live host's lease on "kept" has lived LeaseTTL; let it go
	// through a few more renewals.
	time.Sleep(ttl)
	if held, err := third.Held(ctx, now, "kept"); err != nil || held != 1 {
		t.Fatalf("a live host's lease must be renewed: held %d err %v", held, err)
	}
	if _, _, ok, _ := third.Acquire(ctx, now, "kept", 1, 0); ok {
		t.Fatal("a renewed lease's slot was given away")
	}
	if err := live.Close(); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"kept", "slot"} {
		if held, err := third.Held(ctx, now, key); err != nil || held != 0 {
			t.Fatalf("%s after Close: held %d err %v, want 0", key, held, err)
		}
	}
}

// Two stores on one Redis, deciding by Redis TIME while their callers'
// clocks are two hours apart, agree on every algorithm.
func TestRedisTimeAcrossStores(t *testing.T) {
	srv := needServer(t)
	o := Options{KeyPrefix: fmt.Sprintf("rt%d:", prefixSeq.Add(1))}
	a, b := newTestStore(t, srv, o), newTestStore(t, srv, o)
	stores := []*Store{a, b}
	skewed := []time.Time{time.Now().Add(-time.Hour), time.Now().Add(time.Hour)}

	checks := []limiter.Check{
		exactCheck("exact", 10, time.Minute),
		{Key: "smooth", Limit: limiter.Limit{Algorithm: limiter.Smooth, N: 10, Period: time.Hour, Burst: 4}},
		{Key: "anvil", Limit: limiter.Limit{Algorithm: limiter.Anvil, N: 7, Period: time.Minute}},
	}
	for _, c := range checks {
		admitted := 0
		for i := range 30 {
			out := make([]limiter.Decision, 1)
			if err := stores[i%2].Hit(ctx, skewed[i%2], 1, limiter.Leaky, []limiter.Check{c}, out); err != nil {
				t.Fatal(err)
			}
			if out[0].Allowed {
				admitted++
			} else if out[0].RetryAfter <= 0 || out[0].RetryAfter > time.Hour {
				t.Fatalf("%s: refused with retry after %s", c.Limit, out[0].RetryAfter)
			}
		}
		want := map[limiter.Algorithm]int{limiter.Exact: 10, limiter.Smooth: 4, limiter.Anvil: 7}[c.Limit.Algorithm]
		if admitted != want {
			t.Errorf("%s: admitted %d across two stores, want %d", c.Limit, admitted, want)
		}
		out := make([]limiter.Decision, 1)
		for i, s := range stores {
			if err := s.Peek(ctx, skewed[1-i], 0, []limiter.Check{c}, out); err != nil {
				t.Fatal(err)
			}
			if out[0].Count != int64(want) {
				t.Errorf("%s: store %d peeks count %d, want %d", c.Limit, i, out[0].Count, want)
			}
		}
	}

	// Reservations queue across stores, first come first served, and a
	// store can cancel what it booked.
	lim := limiter.Limit{Algorithm: limiter.Exact, N: 1, Period: 10 * time.Second}
	r1, err := a.Reserve(ctx, skewed[0], "queue", lim, 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.Reserve(ctx, skewed[1], "queue", lim, 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Each At is the server's slot moved to the local clock by that call's
	// own measure of the offset, so gaps vary by the replies' travel times.
	if gap := r2.At.Sub(r1.At); gap < 10*time.Second-100*time.Millisecond || gap > 10*time.Second+time.Second {
		t.Fatalf("second slot %s after the first, want 10s", gap)
	}
	if d := time.Until(r1.At); d > 0 {
		t.Fatalf("the first slot is %s in the future, want now", d)
	}
	if err := b.Cancel(ctx, skewed[1], r2); err != nil {
		t.Fatal(err)
	}
	r3, err := a.Reserve(ctx, skewed[0], "queue", lim, 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if gap := r3.At.Sub(r1.At); gap < 10*time.Second-100*time.Millisecond || gap > 10*time.Second+time.Second {
		t.Fatalf("after cancel, the next slot is %s after the first, want 10s", gap)
	}
}

// Scripts flushed from Redis (SCRIPT FLUSH, a restart) are loaded again.
func TestNoScriptRecovery(t *testing.T) {
	srv := needServer(t)
	s := newTestStore(t, srv, Options{UseCallerTime: true})
	adm := admin(t, srv)
	c := exactCheck("ns", 3, time.Minute)
	now := time.Now()
	evals := func() int {
		info, err := adm.Do(ctx, adm.B().Info().Section("commandstats").Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(info) {
			if rest, ok := strings.CutPrefix(line, "cmdstat_eval:calls="); ok {
				n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
				return n
			}
		}
		return 0
	}
	out := make([]limiter.Decision, 1)
	// A first hit loads the script if no test has yet.
	if err := s.Hit(ctx, now, 1, limiter.Leaky, []limiter.Check{exactCheck("warm-up", 3, time.Minute)}, out); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if i == 2 {
			if err := adm.Do(ctx, adm.B().ScriptFlush().Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		before := evals()
		if err := s.Hit(ctx, now, 1, limiter.Leaky, []limiter.Check{c}, out); err != nil {
			t.Fatalf("hit %d: %v", i, err)
		}
		if want := i < 3; out[0].Allowed != want || (want && out[0].Count != int64(i+1)) {
			t.Fatalf("hit %d after flush: %+v", i, out[0])
		}
		if loaded := evals() - before; (i == 2) != (loaded == 1) {
			t.Fatalf("hit %d: %d EVALs; want one exactly after SCRIPT FLUSH", i, loaded)
		}
	}
}

// With the server stopped (SIGSTOP), a call fails within its deadline;
// the same Store recovers when the server continues, and when it is
// replaced by a new one on the same port.
func TestDeadlineAndRecovery(t *testing.T) {
	srv := privateServer(t)
	const deadline = 100 * time.Millisecond
	s := newTestStore(t, srv, Options{Deadline: deadline})
	c := []limiter.Check{exactCheck("d", 1000, time.Minute)}
	out := make([]limiter.Decision, 1)
	hit := func() (time.Duration, error) {
		start := time.Now()
		err := s.Hit(ctx, time.Now(), 1, limiter.Leaky, c, out)
		return time.Since(start), err
	}
	waitOK := func(what string) {
		t.Helper()
		start := time.Now()
		for {
			_, err := hit()
			if err == nil {
				return
			}
			if time.Since(start) > 20*time.Second {
				t.Fatalf("%s: still failing after %s: %v", what, time.Since(start), err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if _, err := hit(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	errs0 := s.Errors()
	for range 3 {
		took, err := hit()
		if err == nil {
			t.Fatal("hit succeeded against a stopped server")
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v, want a deadline", err)
		}
		if took > 10*deadline {
			t.Fatalf("failed after %s, deadline %s", took, deadline)
		}
	}
	if s.Healthy() || s.Errors() < errs0+3 {
		t.Fatalf("healthy %v, errors %d (was %d)", s.Healthy(), s.Errors(), errs0)
	}
	if err := srv.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitOK("after SIGCONT")
	if !s.Healthy() {
		t.Fatal("not healthy after recovering")
	}

	// A new server on the same port (no scripts loaded, no data).
	srv.Kill()
	if _, err := hit(); err == nil {
		t.Fatal("hit succeeded with no server")
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitOK("after restart")
	deadlineBy := time.Now().Add(5 * time.Second)
	for !s.Healthy() && time.Now().Before(deadlineBy) {
		time.Sleep(20 * time.Millisecond)
	}
	if !s.Healthy() {
		t.Fatal("not healthy after the restart")
	}
}

// 64 goroutines on two stores sharing one Redis admit exactly N.
func TestConcurrentStoresExact(t *testing.T) {
	srv := needServer(t)
	o := Options{KeyPrefix: fmt.Sprintf("cc%d:", prefixSeq.Add(1))}
	stores := []*Store{newTestStore(t, srv, o), newTestStore(t, srv, o)}
	const n = 25
	for _, mode := range []limiter.Mode{limiter.Leaky, limiter.Strict} {
		c := []limiter.Check{exactCheck(fmt.Sprint("conc", mode), n, time.Minute)}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for w := range 64 {
			wg.Go(func() {
				out := make([]limiter.Decision, 1)
				for range 10 {
					if err := stores[w%2].Hit(ctx, time.Now(), 1, mode, c, out); err != nil {
						t.Error(err)
						return
					}
					if out[0].Allowed {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if got := admitted.Load(); got != n {
			t.Errorf("mode %d: admitted %d of 640, want exactly %d", mode, got, n)
		}
	}
}

// Every key the store writes carries a TTL, and a flood counted Strict
// keeps at most 4N events.
func TestKeysExpireAndAreBounded(t *testing.T) {
	srv := needServer(t)
	s := newTestStore(t, srv, Options{UseCallerTime: true})
	adm := admin(t, srv)
	now := time.Now()
	checks := []limiter.Check{
		{Key: "a", Limit: limiter.Limit{Algorithm: limiter.Anvil, N: 3, Period: time.Minute}},
		exactCheck("e", 5, time.Minute),
		{Key: "s", Limit: limiter.Limit{Algorithm: limiter.Smooth, N: 5, Period: time.Minute}},
		exactCheck("x{tag}y", 5, time.Minute),
	}
	out := make([]limiter.Decision, len(checks))
	for range 100 {
		if err := s.Hit(ctx, now, 1, limiter.Strict, checks, out); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Reserve(ctx, now, "r", limiter.Limit{Algorithm: limiter.Exact, N: 1, Period: time.Minute}, 1, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.Acquire(ctx, now, "l", 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := s.Acquire(ctx, now, "lt", 0, time.Hour); err != nil {
		t.Fatal(err)
	}
	keys, err := adm.Do(ctx, adm.B().Keys().Pattern(s.prefix+"*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, k := range []string{"a", "e", "s", "x{tag}y", "r", "l", "lt"} {
		want[s.rkey(k)] = true
	}
	if len(keys) != len(want) || s.Len() != len(want) {
		t.Fatalf("keys %q (Len %d), want %d", keys, s.Len(), len(want))
	}
	for _, k := range keys {
		if !want[k] {
			t.Errorf("unexpected key %q", k)
		}
		ttl, err := adm.Do(ctx, adm.B().Pttl().Key(k).Build()).AsInt64()
		if err != nil || ttl <= 0 || ttl > int64(time.Hour/time.Millisecond) {
			t.Errorf("%s: PTTL %d %v", k, ttl, err)
		}
	}
	if got := s.rkey("x{tag}y"); got != s.prefix+"#x{tag}y" {
		t.Errorf("tagged key stored as %q", got)
	}
	if n, err := adm.Do(ctx, adm.B().Llen().Key(s.rkey("e")).Build()).AsInt64(); err != nil || n != 20 {
		t.Errorf("strict flood of 100 at 5/min: log holds %d events (%v), want 4N = 20", n, err)
	}
}

// DedicatedDB counts keys with DBSIZE; the count is refreshed in the
// background.
func TestLenDedicatedDB(t *testing.T) {
	srv := needServer(t)
	db7, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, SelectDB: 7, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db7.Close()
	if err := db7.Do(ctx, db7.B().Flushdb().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	a := newTestStore(t, srv, Options{DB: 7, DedicatedDB: true, UseCallerTime: true, LenInterval: 100 * time.Millisecond})
	b := newTestStore(t, srv, Options{DB: 7, DedicatedDB: true, UseCallerTime: true, KeyPrefix: a.prefix})
	out := make([]limiter.Decision, 1)
	for i := range 5 {
		if err := b.Hit(ctx, time.Now(), 1, limiter.Leaky, []limiter.Check{exactCheck(fmt.Sprint("k", i), 1, time.Minute)}, out); err != nil {
			t.Fatal(err)
		}
	}
	if b.Len() != 5 {
		t.Fatalf("Len of the store that wrote: %d, want 5", b.Len())
	}
	deadline := time.Now().Add(5 * time.Second)
	for a.Len() != 5 {
		if time.Now().After(deadline) {
			t.Fatalf("the other store's Len is still %d, want 5", a.Len())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A server out of memory (noeviction) refuses writes: limiter.ErrFull.
// Peeks still work.
func TestFullIsErrFull(t *testing.T) {
	srv := privateServer(t, "--maxmemory", "3mb", "--maxmemory-policy", "noeviction")
	s := newTestStore(t, srv, Options{UseCallerTime: true})
	out := make([]limiter.Decision, 1)
	now := time.Now()
	var err error
	for i := 0; i < 200000 && err == nil; i++ {
		err = s.Hit(ctx, now, 1, limiter.Leaky, []limiter.Check{exactCheck(fmt.Sprintf("fill-%d-%s", i, strings.Repeat("x", 100)), 100, time.Hour)}, out)
	}
	if !errors.Is(err, limiter.ErrFull) {
		t.Fatalf("writes to a full server: %v, want ErrFull", err)
	}
	if err := s.Peek(ctx, now, 1, []limiter.Check{exactCheck("fill-0", 100, time.Hour)}, out); err != nil {
		t.Fatalf("peek on a full server: %v", err)
	}
}

func TestHashSlot(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, want := range map[string]uint16{
		"123456789": 12739, "foo": 12182, "bar": 5061,
		"user1000": 3443, "{user1000}.following": 3443, "foo{}{bar}": 8363, "foo{{bar}}zap": 4015, "foo{bar}{zap}": 5061,
	} {
		if got := hashSlot(key); got != want {
			t.Errorf("hashSlot(%q) = %d, want %d", key, got, want)
		}
	}
}

// In Cluster mode the checks of one call must share a slot; keys with a
// common hash tag do.
func TestClusterCrossSlot(t *testing.T) {
	s := &Store{opts: Options{Cluster: true}, prefix: "sluice:"}
	out := make([]limiter.Decision, 2)
	apart := []limiter.Check{exactCheck("policy:rule:0:alice", 1, time.Minute), exactCheck("policy:rule:1:alice", 1, time.Minute)}
	if hashSlot(s.rkey(apart[0].Key)) == hashSlot(s.rkey(apart[1].Key)) {
		t.Fatal("test keys happen to share a slot")
	}
	err := s.Hit(ctx, time.Now(), 1, limiter.Leaky, apart, out)
	if !errors.Is(err, ErrCrossSlot) || !errors.Is(err, limiter.ErrBadRequest) {
		t.Fatalf("cross-slot hit: %v", err)
	}
	together := []limiter.Check{exactCheck("policy:0:{rule:alice}", 1, time.Minute), exactCheck("policy:1:{rule:alice}", 1, time.Minute)}
	keys, err := s.checkKeys(together)
	if err != nil || hashSlot(keys[0]) != hashSlot("rule:alice") {
		t.Fatalf("tagged keys %q: %v", keys, err)
	}
}

// Against a real (one-node) Redis Cluster: decisions, leases and
// reservations work, keys with a common hash tag are decided together,
// and keys in different slots are refused before reaching Redis.
func TestClusterMode(t *testing.T) {
	srv := privateServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	adm := admin(t, srv)
	if err := adm.Do(ctx, adm.B().ClusterAddslotsrange().StartSlotEndSlot().StartSlotEndSlot(0, 16383).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := adm.Do(ctx, adm.B().ClusterInfo().Build()).ToString()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not ready: %q %v", info, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s := newTestStore(t, srv, Options{Cluster: true})
	now := time.Now()
	out := make([]limiter.Decision, 2)
	apart := []limiter.Check{exactCheck("a:0:x", 2, time.Minute), exactCheck("a:1:x", 1, time.Minute)}
	if err := s.Hit(ctx, now, 1, limiter.Leaky, apart, out); !errors.Is(err, ErrCrossSlot) {
		t.Fatalf("cross-slot hit: %v", err)
	}
	together := []limiter.Check{exactCheck("p:0:{rule:x}", 2, time.Minute), exactCheck("p:1:{rule:x}", 1, time.Minute)}
	for i := range 3 {
		if err := s.Hit(ctx, now, 1, limiter.Leaky, together, out); err != nil {
			t.Fatal(err)
		}
		// The first hit counts on both; later ones are refused by the
		// second limit, so (Leaky) the first does not count them either.
		if !out[0].Allowed || out[0].Count != min(int64(i+1), 2) || out[1].Allowed != (i == 0) {
			t.Fatalf("hit %d: %+v", i, out)
		}
	}
	if _, _, ok, err := s.Acquire(ctx, now, "lease", 1, 0); !ok || err != nil {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	if _, err := s.Reserve(ctx, now, "queue", limiter.Limit{Algorithm: limiter.Exact, N: 1, Period: time.Minute}, 1, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.recount(ctx); err != nil || s.Len() != 4 {
		t.Fatalf("Len %d (%v), want 4", s.Len(), err)
	}
}

// With Redis TIME, Undo takes the caller's (local) time of the hit and
// still finds it.
func TestUndoWithRedisTime(t *testing.T) {
	srv := needServer(t)
	s := newTestStore(t, srv, Options{})
	c := []limiter.Check{exactCheck("u", 2, time.Minute)}
	out := make([]limiter.Decision, 1)
	var ats []time.Time
	for i := range 3 {
		at := time.Now()
		if err := s.Hit(ctx, at, 1, limiter.Leaky, c, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Allowed != (i < 2) {
			t.Fatalf("hit %d: %+v", i, out[0])
		}
		ats = append(ats, at)
	}
	if err := s.Undo(ctx, time.Now(), ats[1], 1, c); err != nil {
		t.Fatal(err)
	}
	if err := s.Hit(ctx, time.Now(), 1, limiter.Leaky, c, out); err != nil || !out[0].Allowed {
		t.Fatalf("after undo: %+v %v", out[0], err)
	}
}

// A lease ends exactly at its TTL, to the microsecond, as in store/memory.
func TestLeaseTTLBoundary(t *testing.T) {
	srv := needServer(t)
	s := newTestStore(t, srv, Options{UseCallerTime: true})
	t0 := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	if _, _, ok, err := s.Acquire(ctx, t0, "b", 1, 30*time.Second); !ok || err != nil {
		t.Fatal(ok, err)
	}
	for _, tc := range []struct {
		at   time.Duration
		held int64
	}{{30*time.Second - time.Microsecond, 1}, {30 * time.Second, 0}} {
		if held, err := s.Held(ctx, t0.Add(tc.at), "b"); err != nil || held != tc.held {
			t.Errorf("held at %s: %d %v, want %d", tc.at, held, err, tc.held)
		}
	}
}
