package redis

import (
	"errors"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/redistest"
)

// startCluster starts a cluster of masters masters with replicas replicas
// each, stopped at the end of the test.
func startCluster(t *testing.T, masters, replicas int) *redistest.Cluster {
	t.Helper()
	needServer(t)
	c, err := redistest.StartCluster(t.TempDir(), masters, replicas)
	if errors.Is(err, redistest.ErrNoRedis) {
		peer.Missing(t, "redis-server", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Kill)
	return c
}

// replicaOf returns the live node replicating master.
func replicaOf(t *testing.T, c *redistest.Cluster, master *redistest.Server) *redistest.Server {
	t.Helper()
	for _, n := range c.Nodes {
		if n == master || !n.Alive() {
			continue
		}
		if p, err := redistest.InfoField(n.Addr(), "replication", "master_port"); err == nil && p == strconv.Itoa(master.Port()) {
			return n
		}
	}
	t.Fatalf("no replica of %s", master.Addr())
	return nil
}

// TestClusterThreeMastersExact: two stores on a cluster of three masters
// admit exactly 10 of 100 requests of one sender at c=8, for several
// senders (their keys land on different masters).
func TestClusterThreeMastersExact(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node Redis Cluster")
	}
	c := startCluster(t, 3, 0)
	r := newFailoverRun(t, Options{Addrs: c.Addrs(), Cluster: true})
	masters := map[string]bool{}
	for sender := range 6 {
		adm, fail := r.admitExactly(sender, 100, 8)
		if adm != failoverLimit || fail != 0 {
			t.Errorf("sender %d: %d of 100 admitted (%d failed), want exactly %d", sender, adm, fail, failoverLimit)
		}
		m, err := c.MasterOf(int(hashSlot(r.stores[0].rkey(senderChecks(sender)[0].Key))))
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Addr()] = true
	}
	// ClusterSlot agrees with the cluster's own CLUSTER KEYSLOT, for keys
	// with and without hash tags of their own.
	for _, k := range []string{"plain", "policy\x00{rule\x00sender=a@b}\x000", "a}b{c", "{}x", "x{y}z{w}", "{", senderChecks(7)[1].Key} {
		v, err := redistest.Do(c.Nodes[0].Addr(), "CLUSTER", "KEYSLOT", r.stores[0].rkey(k))
		if err != nil {
			t.Fatal(err)
		}
		if got := ClusterSlot(k); int64(got) != v {
			t.Errorf("ClusterSlot(%q) = %d, CLUSTER KEYSLOT says %v", k, got, v)
		}
	}
	if len(masters) < 2 {
		t.Errorf("the senders' keys all landed on one master (%v): the test shows nothing about a cluster", masters)
	}
}

// TestClusterFailover: three masters with one replica each; two stores
// (fail open, fail closed) under policy load at c=8; the master holding a
// dead host's leases SIGKILLed. Its replica takes over; decisions on its
// slots fail meanwhile and get the fail mode; the counts lost are few
// (reported); the dead host's leases free after lease_ttl; decisions are
// exact again afterwards.
//
// Run twice, as TestSentinelFailover: answering at once, and with
// WaitReplicas 1.
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("failover test: starts a six-node Redis Cluster and waits for a failover")
	}
	for _, wait := range []int{0, 1} {
		t.Run(fmt.Sprintf("wait_replicas=%d", wait), func(t *testing.T) { clusterFailover(t, wait) })
	}
}

func clusterFailover(t *testing.T, wait int) {
	c := startCluster(t, 3, 1)
	o := Options{Addrs: c.Addrs(), Cluster: true, WaitReplicas: wait, WaitTimeout: 500 * time.Millisecond}
	r := newFailoverRun(t, o)
	if adm, fail := r.admitExactly(-2, 100, 8); adm != failoverLimit || fail != 0 {
		t.Errorf("before the failover: %d of 100 admitted (%d failed), want exactly %d", adm, fail, failoverLimit)
	}

	const leaseKey, leaseCap = "class\x00partners", 3
	leaseRKey := r.stores[0].rkey(leaseKey)
	slot := int(hashSlot(leaseRKey))
	victim, err := c.MasterOf(slot)
	if err != nil {
		t.Fatal(err)
	}
	heir := replicaOf(t, c, victim)
	// The victim's slots, as the cluster saw them before the kill.
	owners, err := c.SlotMasters()
	if err != nil {
		t.Fatal(err)
	}
	r.onVictim = func(sender int) bool { return owners[ClusterSlot(senderChecks(sender)[0].Key)] == victim }
	onVictim := -3
	for owners[ClusterSlot(senderChecks(onVictim)[0].Key)] != victim {
		onVictim--
	}
	perAdmission := r.bytesPerAdmission(t, victim.Addr(), onVictim)
	crashed := leaseHolder(t, o, r.stores[0].prefix, leaseKey, leaseCap)
	if err := redistest.WaitFor(5*time.Second, func() error {
		v, err := redistest.DoAll(heir.Addr(), []string{"READONLY"}, []string{"ZCARD", leaseRKey})
		if err == nil && v[1] != int64(leaseCap) {
			err = fmt.Errorf("replica holds %v leases", v[1])
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	freedCh := watchLeases(r.stores[0], leaseKey, leaseCap, 60*time.Second)

	killed, switched := r.failover(t, r.killAfterReading(victim.Addr(), heir.Addr(), perAdmission, func() error {
		if err := victim.Signal(syscall.SIGKILL); err != nil {
			return err
		}
		victim.Kill() // reaps it; Alive is false from here on
		return nil
	}), func() error {
		m, err := c.MasterOf(slot)
		if err == nil && m != heir {
			err = fmt.Errorf("slot %d is served by %s", slot, m.Addr())
		}
		if err == nil {
			_, err = r.stores[0].Held(ctx, time.Now(), leaseKey)
		}
		return err
	})
	if wait > 0 {
		t.Logf("the old master rejoined as a replica %s after the switch", rejoin(t, victim, heir.Addr()))
	}
	f := r.conclude(t, "cluster", freedCh, killed, switched, crashed)
	t.Logf("cluster failover: %d failed decisions of senders on the other masters (and %d whose replica did not acknowledge within wait_timeout)", f.failedElsewhere, f.unreplicatedElsewhere)
	// cluster-require-full-coverage no: the other masters keep serving.
	if f.failedElsewhere != 0 {
		t.Errorf("%d decisions of senders on the surviving masters failed", f.failedElsewhere)
	}
}
