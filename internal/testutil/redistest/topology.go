package redistest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Port is the server's TCP port.
func (s *Server) Port() int { return s.port }

// Alive reports whether the server process is running (not Killed).
func (s *Server) Alive() bool { return s.cmd != nil }

// StartReplica starts a redis-server in dir replicating master, and waits
// until its link to the master is up and the first sync is done.
func StartReplica(dir string, master *Server, extra ...string) (*Server, error) {
	args := append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(master.port)}, extra...)
	s, err := Start(dir, 0, args...)
	if err != nil {
		return nil, err
	}
	err = WaitFor(15*time.Second, func() error {
		st, err := InfoField(s.Addr(), "replication", "master_link_status")
		if err == nil && st != "up" {
			err = fmt.Errorf("replica %s: master_link_status %q", s.Addr(), st)
		}
		return err
	})
	if err != nil {
		s.Kill()
		return nil, err
	}
	return s, nil
}

// SentinelTiming are the Sentinel settings that decide how fast a failover
// goes: how long a master must be unreachable to be thought down, and the
// failover timeout (also the least time between two failovers of a set).
type SentinelTiming struct {
	DownAfter       time.Duration // down-after-milliseconds
	FailoverTimeout time.Duration // failover-timeout
	// Conf are more sentinel.conf lines ("requirepass secret").
	Conf []string
}

// StartSentinel starts a Sentinel (redis-server --sentinel) in dir
// watching master as set name, with the given quorum.
func StartSentinel(dir, name string, master *Server, quorum int, tm SentinelTiming) (*Server, error) {
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d %[3]d\n"+
		"sentinel down-after-milliseconds %[1]s %[4]d\n"+
		"sentinel failover-timeout %[1]s %[5]d\n"+
		"sentinel parallel-syncs %[1]s 1\n",
		name, master.port, quorum, tm.DownAfter.Milliseconds(), tm.FailoverTimeout.Milliseconds())
	for _, l := range tm.Conf {
		body += l + "\n"
	}
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		return nil, err
	}
	return start(&Server{dir: dir, conf: conf}, 0)
}

// SentinelMaster asks a Sentinel for the master of set name (host:port).
func SentinelMaster(sentinel, name string) (string, error) {
	v, err := Do(sentinel, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", name)
	if err != nil {
		return "", err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return "", fmt.Errorf("sentinel %s knows no master %q: %v", sentinel, name, v)
	}
	return fmt.Sprintf("%v:%v", a[0], a[1]), nil
}

// WaitSentinelsReady waits until every Sentinel knows the others and the
// replicas of set name: before that a failover may not gather its quorum.
func WaitSentinelsReady(sentinels []*Server, name string, replicas int, timeout time.Duration) error {
	return WaitFor(timeout, func() error {
		for _, s := range sentinels {
			for _, q := range []struct {
				cmd  string
				want int
			}{{"SENTINELS", len(sentinels) - 1}, {"REPLICAS", replicas}} {
				v, err := Do(s.Addr(), "SENTINEL", q.cmd, name)
				if err != nil {
					return err
				}
				if a, _ := v.([]any); len(a) < q.want {
					return fmt.Errorf("sentinel %s sees %d %s of %s, want %d", s.Addr(), len(a), strings.ToLower(q.cmd), name, q.want)
				}
			}
		}
		return nil
	})
}

// SentinelGroup is a master, its replicas and the Sentinels watching them.
type SentinelGroup struct {
	Name      string    // the master set
	Master    *Server   // the master at the start
	Replicas  []*Server // its replicas at the start
	Sentinels []*Server
}

// StartSentinelGroup starts, in subdirectories of dir, a master with
// replicas replicas and sentinels Sentinels (quorum: a majority) watching
// it as set name, and waits until the Sentinels know each other and the
// replicas. On error what was started is stopped.
func StartSentinelGroup(dir, name string, replicas, sentinels int, tm SentinelTiming) (*SentinelGroup, error) {
	g := &SentinelGroup{Name: name}
	if err := g.start(dir, replicas, sentinels, tm); err != nil {
		g.Kill()
		return nil, err
	}
	return g, nil
}

func (g *SentinelGroup) start(dir string, replicas, sentinels int, tm SentinelTiming) error {
	sub := func(name string) (string, error) {
		d := filepath.Join(dir, name)
		return d, os.MkdirAll(d, 0o700)
	}
	d, err := sub("master")
	if err != nil {
		return err
	}
	if g.Master, err = Start(d, 0); err != nil {
		return err
	}
	for i := range replicas {
		if d, err = sub(fmt.Sprintf("replica%d", i)); err != nil {
			return err
		}
		r, err := StartReplica(d, g.Master)
		if err != nil {
			return err
		}
		g.Replicas = append(g.Replicas, r)
	}
	for i := range sentinels {
		if d, err = sub(fmt.Sprintf("sentinel%d", i)); err != nil {
			return err
		}
		s, err := StartSentinel(d, g.Name, g.Master, sentinels/2+1, tm)
		if err != nil {
			return err
		}
		g.Sentinels = append(g.Sentinels, s)
	}
	return WaitSentinelsReady(g.Sentinels, g.Name, replicas, 20*time.Second)
}

// SentinelAddrs are the Sentinels' addresses.
func (g *SentinelGroup) SentinelAddrs() []string {
	var out []string
	for _, s := range g.Sentinels {
		out = append(out, s.Addr())
	}
	return out
}

// Kill stops every process of the group.
func (g *SentinelGroup) Kill() {
	for _, s := range g.Sentinels {
		s.Kill()
	}
	for _, r := range g.Replicas {
		r.Kill()
	}
	if g.Master != nil {
		g.Master.Kill()
	}
}

// Cluster is a Redis Cluster of private servers on loopback ports.
type Cluster struct {
	// Nodes are the servers, the masters first (as started; a failover
	// changes the roles, see MasterOf).
	Nodes []*Server
	bus   []int // the nodes' cluster bus ports
}

// ClusterNodeTimeout is the cluster-node-timeout of StartCluster's nodes:
// how long a master must be unreachable before its replica takes over.
const ClusterNodeTimeout = time.Second

// StartCluster starts masters nodes holding all 16384 slots in equal
// ranges, each with replicas replicas, and waits until every node reports
// the cluster ok and every replica is in sync. Each node gets a
// subdirectory of dir. On error the nodes started are stopped.
func StartCluster(dir string, masters, replicas int) (*Cluster, error) {
	c := &Cluster{}
	if err := c.start(dir, masters, replicas); err != nil {
		c.Kill()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) start(dir string, masters, replicas int) error {
	total := masters * (1 + replicas)
	for i := range total {
		d := filepath.Join(dir, fmt.Sprintf("node%d", i))
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		s, bus, err := startClusterNode(d)
		if err != nil {
			return err
		}
		c.Nodes = append(c.Nodes, s)
		c.bus = append(c.bus, bus)
	}
	ids := make([]string, total)
	for i, s := range c.Nodes {
		id, err := DoString(s.Addr(), "CLUSTER", "MYID")
		if err != nil {
			return err
		}
		ids[i] = id
		if _, err := Do(s.Addr(), "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return fmt.Errorf("CLUSTER SET-CONFIG-EPOCH on %s: %w", s.Addr(), err)
		}
	}
	for i := range masters {
		lo, hi := i*16384/masters, (i+1)*16384/masters-1
		if _, err := Do(c.Nodes[i].Addr(), "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTSRANGE on %s: %w", c.Nodes[i].Addr(), err)
		}
	}
	for _, s := range c.Nodes[1:] {
		if _, err := Do(s.Addr(), "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(c.Nodes[0].port), strconv.Itoa(c.bus[0])); err != nil {
			return fmt.Errorf("CLUSTER MEET from %s: %w", s.Addr(), err)
		}
	}
	// A replica can follow a master only once it knows it.
	if err := WaitFor(20*time.Second, func() error { return c.allKnown(total) }); err != nil {
		return err
	}
	for i := masters; i < total; i++ {
		m := (i - masters) % masters
		if _, err := Do(c.Nodes[i].Addr(), "CLUSTER", "REPLICATE", ids[m]); err != nil {
			return fmt.Errorf("CLUSTER REPLICATE on %s: %w", c.Nodes[i].Addr(), err)
		}
	}
	return c.WaitHealthy(30 * time.Second)
}

// startClusterNode starts one cluster node in dir. The cluster bus
// defaults to the port + 10000, which may be taken or past 65535: it gets
// a free port of its own, drawn again if the start fails.
func startClusterNode(dir string) (s *Server, bus int, err error) {
	for range 3 {
		if bus, err = FreePort(); err != nil {
			return nil, 0, err
		}
		s, err = Start(dir, 0, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", strconv.FormatInt(ClusterNodeTimeout.Milliseconds(), 10),
			// As docs/redis.md advises: a master lost takes down its
			// own slots only.
			"--cluster-require-full-coverage", "no")
		if err == nil || errors.Is(err, ErrNoRedis) {
			return s, bus, err
		}
	}
	return nil, 0, err
}

// allKnown checks that every node lists total nodes in CLUSTER NODES.
func (c *Cluster) allKnown(total int) error {
	for _, s := range c.Nodes {
		nodes, err := DoString(s.Addr(), "CLUSTER", "NODES")
		if err != nil {
			return err
		}
		if n := strings.Count(strings.TrimSpace(nodes), "\n") + 1; n < total {
			return fmt.Errorf("%s knows %d of %d nodes", s.Addr(), n, total)
		}
	}
	return nil
}

// WaitHealthy waits until every live node reports cluster_state:ok and
// every live replica's link to its master is up.
func (c *Cluster) WaitHealthy(timeout time.Duration) error {
	return WaitFor(timeout, func() error {
		for _, s := range c.Nodes {
			if !s.Alive() {
				continue
			}
			info, err := DoString(s.Addr(), "CLUSTER", "INFO")
			if err != nil {
				return err
			}
			st := fieldOf(info, "cluster_state")
			if st != "ok" {
				return fmt.Errorf("%s: cluster_state %q", s.Addr(), st)
			}
			role, err := InfoField(s.Addr(), "replication", "role")
			if err != nil {
				return err
			}
			if role == "slave" {
				if link, _ := InfoField(s.Addr(), "replication", "master_link_status"); link != "up" {
					return fmt.Errorf("replica %s: master_link_status %q", s.Addr(), link)
				}
			}
		}
		return nil
	})
}

func fieldOf(info, field string) string {
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return v
		}
	}
	return ""
}

// Addrs are the addresses of the live nodes.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, s := range c.Nodes {
		if s.Alive() {
			out = append(out, s.Addr())
		}
	}
	return out
}

// MasterOf returns the live node that serves slot as master, from the
// point of view of the first live node that answers.
func (c *Cluster) MasterOf(slot int) (*Server, error) {
	owners, err := c.SlotMasters()
	if err != nil {
		return nil, err
	}
	if owners[slot] == nil {
		return nil, fmt.Errorf("no master for slot %d", slot)
	}
	return owners[slot], nil
}

// SlotMasters returns the master of every slot (nil for a slot nobody
// serves) from CLUSTER SLOTS of the first live node that answers.
func (c *Cluster) SlotMasters() (*[16384]*Server, error) {
	for _, s := range c.Nodes {
		if !s.Alive() {
			continue
		}
		v, err := Do(s.Addr(), "CLUSTER", "SLOTS")
		if err != nil {
			continue
		}
		var owners [16384]*Server
		ranges, _ := v.([]any)
		for _, r := range ranges {
			a, _ := r.([]any)
			if len(a) < 3 {
				continue
			}
			lo, _ := a[0].(int64)
			hi, _ := a[1].(int64)
			node, _ := a[2].([]any)
			if len(node) < 2 || lo < 0 || hi >= 16384 {
				continue
			}
			port, _ := node[1].(int64)
			for _, n := range c.Nodes {
				if n.port == int(port) {
					for sl := lo; sl <= hi; sl++ {
						owners[sl] = n
					}
				}
			}
		}
		return &owners, nil
	}
	return nil, errors.New("no live cluster node answers")
}

// Kill stops every node.
func (c *Cluster) Kill() {
	for _, s := range c.Nodes {
		s.Kill()
	}
}
