package redis

import (
	"context"
	"crypto/sha1"
	"crypto/tls"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// conn is the narrow slice of a Redis client the store depends on: running
// its scripts, and two keyless commands (for health and Len). The rueidis
// adapter below is the only implementation outside tests.
type conn interface {
	// eval runs sc by EVALSHA, loading it by EVAL when Redis answers
	// NOSCRIPT (after a restart or SCRIPT FLUSH), and returns its reply, an
	// array of integers.
	eval(ctx context.Context, sc *script, keys, args []string) ([]int64, error)
	// countKeys counts the keys matching pattern (SCAN) on every primary,
	// or every key (DBSIZE) when pattern is empty.
	countKeys(ctx context.Context, pattern string) (int64, error)
	// listKeys returns up to max keys matching pattern (SCAN) on every
	// primary.
	listKeys(ctx context.Context, pattern string, max int) ([]string, error)
	// del deletes keys, one DEL each (they may be on different slots),
	// and returns how many existed.
	del(ctx context.Context, keys []string) (int64, error)
	ping(ctx context.Context) error
	// primary is the address of the master in use, with Sentinel; "" else.
	primary() string
	close()
}

// script is one Lua script: the shared prelude (lua/common.lua) and a body.
type script struct {
	name   string
	src    string
	sha    string
	writes bool // the script may write (not flags=no-writes)
}

//go:embed lua/*.lua
var luaFS embed.FS

// compose builds a script from core.lua, the given modules and the body
// name.lua.
func compose(name string, readOnly bool, modules ...string) *script {
	// The shebang (Redis 7) declares whether the script writes: Redis then
	// refuses a writing script as a whole when it is out of memory, rather
	// than failing it half-way, and runs a no-writes one anyway.
	src := "#!lua\n"
	if readOnly {
		src = "#!lua flags=no-writes\n"
	}
	for _, m := range append(append([]string{"core"}, modules...), name) {
		b, err := luaFS.ReadFile("lua/" + m + ".lua")
		if err != nil {
			panic(err)
		}
		src += string(b) + "\n"
	}
	sum := sha1.Sum([]byte(src))
	return &script{name: name, src: src, sha: hex.EncodeToString(sum[:]), writes: !readOnly}
}

// Algorithm sets, as bits, for the rate scripts: each variant holds only
// the algorithms its checks use (defining the others costs Redis time on
// every call).
const (
	useAnvil = 1 << iota
	useExact
	useSmooth
)

// rateScripts builds the variants of a rate script, by algorithm set.
func rateScripts(name string, readOnly bool) (v [8]*script) {
	for set := 1; set < 8; set++ {
		var mods []string
		for bit, m := range []string{"anvil", "exact", "smooth"} {
			if set&(1<<bit) != 0 {
				mods = append(mods, m)
			}
		}
		v[set] = compose(name, readOnly, append(mods, "rate")...)
	}
	return v
}

var (
	hitScripts    = rateScripts("hit", false)
	peekScripts   = rateScripts("peek", true)
	undoScripts   = rateScripts("undo", false)
	reserveScript = compose("reserve", false, "exact")
	cancelScript  = compose("cancel", false, "exact")
	acquireScript = compose("acquire", false, "lease")
	releaseScript = compose("release", false, "lease")
	heldScript    = compose("held", true, "lease")
	renewScript   = compose("renew", false, "lease")
	probeScript   = compose("probe", true)
)

// rconn adapts a rueidis client to conn. With waitReplicas > 0, every
// writing script is followed, on the same connection, by WAIT
// waitReplicas waitMs, and its reply is returned only once that many
// replicas have acknowledged it (else ErrNotReplicated).
type rconn struct {
	c            rueidis.Client
	waitReplicas int64
	waitMs       int64
}

func dial(o Options) (conn, error) {
	opt := rueidis.ClientOption{
		InitAddress: o.Addrs,
		Username:    o.Username,
		Password:    o.Password,
		SelectDB:    o.DB,
		TLSConfig:   o.TLS,
		// Standalone unless told otherwise: a client that guesses would
		// follow a cluster without the slot checks below.
		ForceSingleClient: !o.Cluster,
		// No client-side caching: every read is part of a decision.
		DisableCache: true,
		// Never resend a command after a network error: a script that ran
		// but whose reply was lost would count twice.
		DisableRetry: true,
		Dialer:       net.Dialer{Timeout: o.DialTimeout},
		DialCtxFn:    dialAddr,
	}
	if o.Cluster {
		// Besides following MOVED replies and closed connections, reread
		// the slot map now and then: after a failover the promoted
		// replica is found even if no connection to the dead master
		// closed cleanly.
		opt.ClusterOption.ShardsRefreshInterval = topologyRefresh
	}
	if o.MasterSet != "" {
		// Addrs are the Sentinels. The client subscribes to their
		// +switch-master events and also asks them for the master every
		// topologyRefresh, in case it missed an event.
		opt.ForceSingleClient = false
		opt.Sentinel = rueidis.SentinelOption{
			MasterSet:               o.MasterSet,
			Dialer:                  opt.Dialer,
			TLSConfig:               o.TLS,
			Username:                o.SentinelUsername,
			Password:                o.SentinelPassword,
			TopologyRefreshInterval: topologyRefresh,
		}
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, err
	}
	return rconn{c: c, waitReplicas: int64(o.WaitReplicas), waitMs: max(o.WaitTimeout.Milliseconds(), 1)}, nil
}

// dialAddr connects to addr: "unix:PATH" is a unix socket, anything
// else host:port over TCP, with TLS when tc is set.
func dialAddr(ctx context.Context, addr string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		return d.DialContext(ctx, "unix", path)
	}
	if tc != nil {
		td := tls.Dialer{NetDialer: d, Config: tc}
		return td.DialContext(ctx, "tcp", addr)
	}
	return d.DialContext(ctx, "tcp", addr)
}

// topologyRefresh is how often the client rereads a Cluster's slot map or
// asks the Sentinels for the master, besides reacting to events.
const topologyRefresh = 2 * time.Second

func (r rconn) primary() string {
	if r.c.Mode() != rueidis.ClientModeSentinel {
		return ""
	}
	for addr := range r.c.Nodes() {
		return addr
	}
	return ""
}

func (r rconn) eval(ctx context.Context, sc *script, keys, args []string) ([]int64, error) {
	if r.waitReplicas > 0 && sc.writes {
		return r.evalWait(ctx, sc, keys, args)
	}
	res := r.c.Do(ctx, r.c.B().Evalsha().Sha1(sc.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	if re, ok := rueidis.IsRedisErr(res.Error()); ok && re.IsNoScript() {
		res = r.c.Do(ctx, r.c.B().Eval().Script(sc.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	}
	return res.AsIntSlice()
}

// evalWait runs sc and then WAIT in one round trip on one connection
// (WAIT waits for that connection's writes; rueidis sends a blocking
// command's batch on a connection of its own, in a Cluster the one of
// the keys' slot).
func (r rconn) evalWait(ctx context.Context, sc *script, keys, args []string) ([]int64, error) {
	wait := func() rueidis.Completed { return r.c.B().Wait().Numreplicas(r.waitReplicas).Timeout(r.waitMs).Build() }
	res := r.c.DoMulti(ctx, r.c.B().Evalsha().Sha1(sc.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), wait())
	if re, ok := rueidis.IsRedisErr(res[0].Error()); ok && re.IsNoScript() {
		res = r.c.DoMulti(ctx, r.c.B().Eval().Script(sc.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), wait())
	}
	v, err := res[0].AsIntSlice()
	if err != nil {
		return nil, err
	}
	n, err := res[1].AsInt64()
	if err != nil {
		return nil, fmt.Errorf("WAIT: %w", err)
	}
	if n < r.waitReplicas {
		return nil, fmt.Errorf("%w: %d of %d replicas within %d ms", ErrNotReplicated, n, r.waitReplicas, r.waitMs)
	}
	return v, nil
}

func (r rconn) countKeys(ctx context.Context, pattern string) (int64, error) {
	var total int64
	err := r.primaries(ctx, func(addr string, n rueidis.Client) error {
		if pattern == "" {
			v, err := n.Do(ctx, n.B().Dbsize().Build()).AsInt64()
			if err != nil {
				return fmt.Errorf("DBSIZE on %s: %w", addr, err)
			}
			total += v
			return nil
		}
		return scan(ctx, addr, n, pattern, func(keys []string) bool {
			total += int64(len(keys))
			return true
		})
	})
	return total, err
}

func (r rconn) listKeys(ctx context.Context, pattern string, max int) ([]string, error) {
	var out []string
	err := r.primaries(ctx, func(addr string, n rueidis.Client) error {
		return scan(ctx, addr, n, pattern, func(keys []string) bool {
			out = append(out, keys[:min(len(keys), max-len(out))]...)
			return len(out) < max
		})
	})
	return out, err
}

func (r rconn) del(ctx context.Context, keys []string) (int64, error) {
	var n int64
	for _, k := range keys {
		v, err := r.c.Do(ctx, r.c.B().Del().Key(k).Build()).AsInt64()
		if err != nil {
			return n, fmt.Errorf("DEL: %w", err)
		}
		n += v
	}
	return n, nil
}

// primaries calls fn for every node holding keys: each master of a
// Cluster, or the one server.
func (r rconn) primaries(ctx context.Context, fn func(addr string, n rueidis.Client) error) error {
	for addr, n := range r.c.Nodes() {
		if r.c.Mode() == rueidis.ClientModeCluster {
			role, err := n.Do(ctx, n.B().Role().Build()).ToArray()
			if err != nil {
				return fmt.Errorf("ROLE on %s: %w", addr, err)
			}
			if len(role) == 0 {
				continue
			}
			if s, _ := role[0].ToString(); s != "master" {
				continue
			}
		}
		if err := fn(addr, n); err != nil {
			return err
		}
	}
	return nil
}

// scan runs SCAN MATCH pattern on one node, giving each batch to fn
// until it returns false.
func scan(ctx context.Context, addr string, n rueidis.Client, pattern string, fn func([]string) bool) error {
	var cursor uint64
	for {
		e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return fmt.Errorf("SCAN on %s: %w", addr, err)
		}
		if !fn(e.Elements) {
			return nil
		}
		if cursor = e.Cursor; cursor == 0 {
			return nil
		}
	}
}

func (r rconn) ping(ctx context.Context) error {
	return r.c.Do(ctx, r.c.B().Ping().Build()).Error()
}

func (r rconn) close() { r.c.Close() }

// serverError reports whether err is a reply from Redis (the server was
// reached) rather than a failure to reach it.
func serverError(err error) (*rueidis.RedisError, bool) {
	var re *rueidis.RedisError
	if errors.As(err, &re) && !re.IsNil() {
		return re, true
	}
	return nil, false
}

// accessDenied says what to fix when err is Redis refusing sluice's
// credentials or its ACL user's rights, or "" for any other error.
func accessDenied(o Options, err error) string {
	re, ok := serverError(err)
	if !ok {
		return ""
	}
	who := "the default user"
	if o.Username != "" {
		who = fmt.Sprintf("user %q", o.Username)
	}
	switch code, _, _ := strings.Cut(re.Error(), " "); code {
	case "WRONGPASS":
		return fmt.Sprintf("Redis refused to authenticate sluice as %s: check username and password (or password_file), and that the ACL user is on", who)
	case "NOAUTH":
		return "Redis requires authentication: set username and password (or password_file)"
	case "NOPERM":
		return fmt.Sprintf("the ACL of %s does not allow a command or key sluice needs: give it ~%s and +@all -@dangerous +role (docs/redis.md)", who, globPattern(o.KeyPrefix))
	}
	return ""
}

// isOOM reports whether Redis refused a write for lack of memory.
func isOOM(err error) bool {
	re, ok := serverError(err)
	return ok && strings.HasPrefix(re.Error(), "OOM")
}

// defaultDialTimeout bounds one connection attempt; commands give up at
// their own deadline before that.
const defaultDialTimeout = 2 * time.Second

// The circuit breaker's defaults: three misses in a row are not a slow
// moment (a pipelined batch that missed shares one cause), and a probe
// every half second costs at most one deadline's wait per half second
// while bringing decisions back within half a second of Redis's return.
const (
	defaultBreakAfter    = 3
	defaultProbeInterval = 500 * time.Millisecond
)
