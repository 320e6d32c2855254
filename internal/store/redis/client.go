package redis

import (
	"context"
	"crypto/sha1"
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
	ping(ctx context.Context) error
	close()
}

// script is one Lua script: the shared prelude (lua/common.lua) and a body.
type script struct {
	name string
	src  string
	sha  string
}

//go:embed lua/*.lua
var luaFS embed.FS

func mustScript(name string, readOnly bool) *script {
	common, err := luaFS.ReadFile("lua/common.lua")
	if err != nil {
		panic(err)
	}
	body, err := luaFS.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic(err)
	}
	// The shebang (Redis 7) declares whether the script writes: Redis then
	// refuses a writing script as a whole when it is out of memory, rather
	// than failing it half-way, and runs a no-writes one anyway.
	shebang := "#!lua\n"
	if readOnly {
		shebang = "#!lua flags=no-writes\n"
	}
	src := shebang + string(common) + "\n" + string(body)
	sum := sha1.Sum([]byte(src))
	return &script{name: name, src: src, sha: hex.EncodeToString(sum[:])}
}

var (
	hitScript     = mustScript("hit", false)
	peekScript    = mustScript("peek", true)
	undoScript    = mustScript("undo", false)
	reserveScript = mustScript("reserve", false)
	cancelScript  = mustScript("cancel", false)
	acquireScript = mustScript("acquire", false)
	releaseScript = mustScript("release", false)
	heldScript    = mustScript("held", true)
	renewScript   = mustScript("renew", false)
	probeScript   = mustScript("probe", true)
)

// rconn adapts a rueidis client to conn.
type rconn struct{ c rueidis.Client }

func dial(o Options) (conn, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{
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
	})
	if err != nil {
		return nil, err
	}
	return rconn{c}, nil
}

func (r rconn) eval(ctx context.Context, sc *script, keys, args []string) ([]int64, error) {
	res := r.c.Do(ctx, r.c.B().Evalsha().Sha1(sc.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	if re, ok := rueidis.IsRedisErr(res.Error()); ok && re.IsNoScript() {
		res = r.c.Do(ctx, r.c.B().Eval().Script(sc.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	}
	return res.AsIntSlice()
}

func (r rconn) countKeys(ctx context.Context, pattern string) (int64, error) {
	var total int64
	for addr, n := range r.c.Nodes() {
		if r.c.Mode() == rueidis.ClientModeCluster {
			role, err := n.Do(ctx, n.B().Role().Build()).ToArray()
			if err != nil {
				return 0, fmt.Errorf("ROLE on %s: %w", addr, err)
			}
			if len(role) == 0 {
				continue
			}
			if s, _ := role[0].ToString(); s != "master" {
				continue
			}
		}
		if pattern == "" {
			v, err := n.Do(ctx, n.B().Dbsize().Build()).AsInt64()
			if err != nil {
				return 0, fmt.Errorf("DBSIZE on %s: %w", addr, err)
			}
			total += v
			continue
		}
		var cursor uint64
		for {
			e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(pattern).Count(1000).Build()).AsScanEntry()
			if err != nil {
				return 0, fmt.Errorf("SCAN on %s: %w", addr, err)
			}
			total += int64(len(e.Elements))
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return total, nil
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

// isOOM reports whether Redis refused a write for lack of memory.
func isOOM(err error) bool {
	re, ok := serverError(err)
	return ok && strings.HasPrefix(re.Error(), "OOM")
}

// defaultDialTimeout bounds one connection attempt; commands give up at
// their own deadline before that.
const defaultDialTimeout = 2 * time.Second
