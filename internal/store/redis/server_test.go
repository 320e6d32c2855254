package redis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"sluice/internal/testutil/peer"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"sluice/internal/testutil/redistest"
)

var shared *redistest.Server
var sharedErr error

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-redis-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	shared, sharedErr = redistest.Start(dir, 0)
	code := m.Run()
	if shared != nil {
		shared.Kill()
	}
	os.RemoveAll(dir)
	if code == 0 {
		// Two goroutines of rueidis's Cluster client outlive Close for a
		// moment and then end by themselves: the one that closes the
		// connections a slot map refresh dropped, 5s later, and a slot
		// map refresh delayed by up to a second after a connection closed.
		if err := goleak.Find(
			goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
			goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// needServer returns the shared server, or skips loudly when redis-server
// is not installed (any other failure to start it fails the test).
func needServer(tb testing.TB) *redistest.Server {
	tb.Helper()
	if errors.Is(sharedErr, redistest.ErrNoRedis) {
		peer.Missing(tb, "redis-server", sharedErr)
	}
	if sharedErr != nil {
		tb.Fatalf("starting redis-server: %v", sharedErr)
	}
	return shared
}

// privateServer starts a server of the test's own, for tests that stop it.
func privateServer(t *testing.T, extra ...string) *redistest.Server {
	t.Helper()
	needServer(t)
	s, err := redistest.Start(t.TempDir(), 0, extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	return s
}

var prefixSeq atomic.Int64

// newTestStore connects a Store to srv under a prefix of its own (unless
// o sets one) and closes it at the end of the test.
func newTestStore(tb testing.TB, srv *redistest.Server, o Options) *Store {
	tb.Helper()
	o.Addrs = []string{srv.Addr()}
	if o.KeyPrefix == "" {
		o.KeyPrefix = fmt.Sprintf("t%d:", prefixSeq.Add(1))
	}
	if o.Deadline == 0 {
		o.Deadline = 2 * time.Second // generous: CI machines are noisy
	}
	s, err := New(context.Background(), o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// admin is a plain client for inspecting and disturbing the server.
func admin(tb testing.TB, srv *redistest.Server) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// crash stops a store's background work and drops its connections
// without releasing anything, as a host that dies would.
func crash(s *Store) {
	s.once.Do(func() {
		s.cancel()
		<-s.done
		s.c.close()
	})
}
