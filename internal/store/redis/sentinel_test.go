package redis

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/limiter"
	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/redistest"
)

// sentinelTiming makes failovers quick: a master is down after 1s without
// answers.
var sentinelTiming = redistest.SentinelTiming{DownAfter: time.Second, FailoverTimeout: 5 * time.Second}

// startSentinelGroup starts a master, one replica and three Sentinels,
// stopped at the end of the test.
func startSentinelGroup(t *testing.T) *redistest.SentinelGroup {
	t.Helper()
	needServer(t)
	g, err := redistest.StartSentinelGroup(t.TempDir(), "sluicetest", 1, 3, sentinelTiming)
	if errors.Is(err, redistest.ErrNoRedis) {
		peer.Missing(t, "redis-server", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Kill)
	return g
}

// TestSentinelFailover: a master with one replica and three Sentinels; two
// stores (fail open and fail closed) under policy load at c=8; the master
// SIGKILLed. Decisions fail only until the Sentinels promote the replica
// and the stores follow it, and then get the fail mode; the store logs the
// switch; the counts lost with the master are few (reported); leases of a
// host that died with the master free after lease_ttl, not before; and
// decisions are exact again afterwards (10 of 100 at c=8 over both stores).
//
// Run twice: answering at once (the counts lost are bounded by what was in
// flight and what the replica lagged by: checkLost), and with
// WaitReplicas 1 (none lost).
func TestSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("failover test: starts five Redis processes and waits for a failover")
	}
	for _, wait := range []int{0, 1} {
		t.Run(fmt.Sprintf("wait_replicas=%d", wait), func(t *testing.T) { sentinelFailover(t, wait) })
	}
}

func sentinelFailover(t *testing.T, wait int) {
	g := startSentinelGroup(t)
	o := Options{Addrs: g.SentinelAddrs(), MasterSet: g.Name, WaitReplicas: wait, WaitTimeout: 500 * time.Millisecond}
	r := newFailoverRun(t, o)
	perAdmission := r.bytesPerAdmission(t, g.Master.Addr(), -3)
	if m := r.stores[0].c.primary(); m != g.Master.Addr() {
		t.Fatalf("store follows %q, want the master %s", m, g.Master.Addr())
	}
	if !strings.Contains(r.logs.String(), "following the master named by the Sentinels") {
		t.Errorf("no log line naming the master:\n%s", r.logs)
	}

	const leaseKey, leaseCap = "class\x00partners", 3
	crashed := leaseHolder(t, o, r.stores[0].prefix, leaseKey, leaseCap)
	// The leases must be on the replica before the master dies: this test
	// measures their expiry, not the loss of unreplicated writes (the
	// policy load measures that).
	leaseRKey := r.stores[0].rkey(leaseKey)
	if err := redistest.WaitFor(5*time.Second, func() error {
		n, err := redistest.Do(g.Replicas[0].Addr(), "ZCARD", leaseRKey)
		if err == nil && n != int64(leaseCap) {
			err = fmt.Errorf("replica holds %v leases", n)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	freedCh := watchLeases(r.stores[0], leaseKey, leaseCap, 60*time.Second)
	// The Sentinels promote the replica; wait until both stores decide again.
	kill := r.killAfterReading(g.Master.Addr(), g.Replicas[0].Addr(), perAdmission, func() error { return g.Master.Signal(syscall.SIGKILL) })
	killed, switched := r.failover(t, kill, func() error {
		for i, s := range r.stores {
			if m := s.c.primary(); m != g.Replicas[0].Addr() {
				return fmt.Errorf("store %d follows %q", i, m)
			}
		}
		if m, err := redistest.SentinelMaster(g.Sentinels[0].Addr(), g.Name); err != nil || m != g.Replicas[0].Addr() {
			return fmt.Errorf("sentinel names %q (%v)", m, err)
		}
		return nil
	})
	g.Master.Kill()
	if wait > 0 {
		// Every Sentinel must name the new master before the old one comes
		// back: one that still named the old address would send a client
		// to the restarted, empty server until it is made a replica.
		if err := redistest.WaitFor(30*time.Second, func() error {
			for _, sn := range g.Sentinels {
				if m, err := redistest.SentinelMaster(sn.Addr(), g.Name); err != nil || m != g.Replicas[0].Addr() {
					return fmt.Errorf("sentinel %s names %q (%v)", sn.Addr(), m, err)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		t.Logf("the old master rejoined as a replica %s after the switch", rejoin(t, g.Master, g.Replicas[0].Addr()))
	}
	r.conclude(t, "sentinel", freedCh, killed, switched, crashed)

	if !strings.Contains(r.logs.String(), "switched the master") {
		t.Errorf("the switch to the new master was not logged:\n%s", r.logs)
	}
}

// report logs a failover test's figures.
func report(t *testing.T, name string, f failoverFigures, killed, recovered time.Time, switched time.Duration,
	crashed, freed time.Time, adm, fail int) {
	t.Helper()
	t.Logf("%s failover: decisions failed for %s (fail open) / %s (fail closed), %d failed decisions; "+
		"last failure %s after the kill; topology switched %s after the kill; "+
		"%d admissions beyond the limit over %d senders (%d senders in all), %d short; "+
		"dead host's leases freed %s after its crash (lease_ttl %s); after failover %d of 100 admitted at c=8 (%d failed)",
		name, f.outage[0].Round(time.Millisecond), f.outage[1].Round(time.Millisecond), f.failed,
		recovered.Sub(killed).Round(time.Millisecond), switched.Round(time.Millisecond),
		f.over, f.overKeys, f.senders, f.under, freed.Sub(crashed).Round(time.Millisecond), failoverLeaseTTL, adm, fail)
}

// checkFailover asserts what both failover tests promise.
func checkFailover(t *testing.T, r *failoverRun, f failoverFigures, killed, recovered, crashed, freed time.Time, adm, fail int) {
	t.Helper()
	if f.failed == 0 {
		t.Error("no decision failed: the master was not serving the load when it died")
	}
	if r.wrongFM != 0 {
		t.Errorf("%d failed decisions did not follow the fail mode (open for one store, closed for the other)", r.wrongFM)
	}
	if len(f.exactErr) > 0 {
		t.Errorf("senders first asked after the failover were not decided exactly: %v", f.exactErr)
	}
	if adm != failoverLimit || fail != 0 {
		t.Errorf("after the failover: %d of 100 admitted (%d failed), want exactly %d", adm, fail, failoverLimit)
	}
	// The doomed host's leases end lease_ttl after they were taken: not
	// before (they were replicated), and not later than lease_ttl or the
	// failover, whichever ends last, plus the polling.
	if early := crashed.Add(failoverLeaseTTL - 200*time.Millisecond); freed.Before(early) {
		t.Errorf("the dead host's leases were freed %s after its crash, before lease_ttl %s", freed.Sub(crashed), failoverLeaseTTL)
	}
	if late := maxTime(crashed.Add(failoverLeaseTTL), recovered).Add(2 * time.Second); freed.After(late) {
		t.Errorf("the dead host's leases were held %s after its crash: leaked beyond lease_ttl %s", freed.Sub(crashed), failoverLeaseTTL)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// TestSentinelPassword: Sentinels that require a password are asked with
// Options.SentinelPassword; without it, or with a wrong one, New fails.
func TestSentinelPassword(t *testing.T) {
	master := privateServer(t)
	tm := sentinelTiming
	tm.Conf = []string{"requirepass sentinel-secret"}
	s, err := redistest.StartSentinel(t.TempDir(), "guarded", master, 1, tm)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	o := Options{Addrs: []string{s.Addr()}, MasterSet: "guarded", Deadline: 2 * time.Second, DialTimeout: time.Second}
	for _, pw := range []string{"", "wrong"} {
		o.SentinelPassword = pw
		if st, err := New(ctx, o); err == nil {
			st.Close()
			t.Errorf("sentinel password %q: connected to a Sentinel that requires another", pw)
		}
	}
	o.SentinelPassword = "sentinel-secret"
	st := openStore(t, o)
	if m := st.c.primary(); m != master.Addr() {
		t.Fatalf("store follows %q, want %s", m, master.Addr())
	}
	out := make([]limiter.Decision, 1)
	if err := st.Hit(ctx, time.Now(), 1, limiter.Leaky, senderChecks(1)[:1], out); err != nil || !out[0].Allowed {
		t.Fatalf("hit through the guarded Sentinel's master: %v %+v", err, out[0])
	}
}
