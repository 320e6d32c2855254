package app

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/redistest"
)

// sentinelConfig writes a config sharing limits through the master of
// g, found through its Sentinels.
func sentinelConfig(t *testing.T, g *redistest.SentinelGroup, failMode string) string {
	t.Helper()
	return redisStoreConfig(t, fmt.Sprintf(`addrs = ["%s"]
master_set = %q
key_prefix = "sentinel:"
deadline = "200ms"
fail_mode = %q
`, strings.Join(g.SentinelAddrs(), `", "`), g.Name, failMode), "[throttle]\nenabled = false\n"+senderPolicyDoor)
}

// policyConn is one policy connection to a daemon.
type policyConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialPolicy(t *testing.T, d *Daemon) *policyConn {
	t.Helper()
	c, err := net.Dial("tcp", d.Addrs()[0].String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &policyConn{c, bufio.NewReader(c)}
}

// admitted sends m messages of sender at concurrency c, spread over the
// daemons, and counts the DUNNO answers.
func admitted(t *testing.T, ds []*Daemon, sender string, m, c int) int {
	t.Helper()
	var mu sync.Mutex
	n, next := 0, 0
	var wg sync.WaitGroup
	for w := range c {
		pc := dialPolicy(t, ds[w%len(ds)])
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= m {
					return
				}
				v, err := policyAsk(pc.c, pc.r, sender, fmt.Sprint(sender, i))
				if err != nil {
					t.Error(err)
					return
				}
				if v == "DUNNO" {
					mu.Lock()
					n++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return n
}

// TestDaemonsFollowSentinelFailover: two daemons configured with
// master_set (one failing open, one failing closed) share limits through
// a master with a replica and three Sentinels. The master is SIGKILLed:
// each daemon answers per its fail mode until the Sentinels promote the
// replica, logs the switch, and then decides exactly again (10 of 100 at
// c=8 over both).
func TestDaemonsFollowSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("failover test: starts five Redis processes and waits for a failover")
	}
	g, err := redistest.StartSentinelGroup(t.TempDir(), "sluiceapp", 1, 3,
		redistest.SentinelTiming{DownAfter: time.Second, FailoverTimeout: 5 * time.Second})
	if errors.Is(err, redistest.ErrNoRedis) {
		peer.Missing(t, "redis-server", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Kill)
	logA := &logbuf.Buffer{}
	open := startDaemonLog(t, sentinelConfig(t, g, "open"), slog.New(slog.NewTextHandler(logA, nil)))
	closed := startDaemon(t, sentinelConfig(t, g, "closed"))
	ds := []*Daemon{open, closed}
	if n := admitted(t, ds, "before@example.org", 100, 8); n != 10 {
		t.Fatalf("before the failover: %d of 100 admitted, want 10", n)
	}
	if !strings.Contains(logA.String(), g.Master.Addr()) {
		t.Errorf("the daemon did not log the master it follows (%s):\n%s", g.Master.Addr(), logA)
	}

	// The fail-open daemon is asked about a sender over its limit (normal
	// answer: DEFER_IF_PERMIT; fail mode: DUNNO), the fail-closed one about
	// fresh senders (normal: DUNNO; fail mode: DEFER_IF_PERMIT).
	pa, pb := dialPolicy(t, open), dialPolicy(t, closed)
	if err := g.Master.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var failedA, failedB int
	var lastFail time.Time
	for i := 0; ; i++ {
		va, err := policyAsk(pa.c, pa.r, "before@example.org", fmt.Sprint("a", i))
		if err != nil {
			t.Fatal(err)
		}
		vb, err := policyAsk(pb.c, pb.r, fmt.Sprintf("fresh%d@example.org", i), fmt.Sprint("b", i))
		if err != nil {
			t.Fatal(err)
		}
		if va == "DUNNO" {
			failedA++
			lastFail = time.Now()
		}
		if vb == "DEFER_IF_PERMIT" {
			failedB++
			lastFail = time.Now()
		}
		if failedA > 0 && failedB > 0 && va == "DEFER_IF_PERMIT" && vb == "DUNNO" {
			break
		}
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("30s after the kill: fail-open daemon answered %s (%d fail-mode answers), fail-closed %s (%d)\n%s",
				va, failedA, vb, failedB, logA)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("fail-mode answers until %s after the kill (%d from the fail-open daemon, %d from the fail-closed one)",
		lastFail.Sub(killed).Round(time.Millisecond), failedA, failedB)
	// The first decision the store makes after failing looks at the
	// master before it returns: the switch is in the log already, before
	// the limiter's "recovered" that the decision caused.
	lines := logA.String()
	sw, rec := strings.Index(lines, "switched the master"), strings.Index(lines, "limiter store recovered")
	if sw < 0 || !strings.Contains(lines, g.Replicas[0].Addr()) {
		t.Errorf("the daemon answered normally again without having logged the switch to %s:\n%s", g.Replicas[0].Addr(), lines)
	} else if rec >= 0 && rec < sw {
		t.Errorf("the daemon logged \"recovered\" before \"switched the master\":\n%s", lines)
	}
	if n := admitted(t, ds, "after@example.org", 100, 8); n != 10 {
		t.Fatalf("after the failover: %d of 100 admitted, want 10", n)
	}
}
