package redis

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"sluice/internal/limiter"
	"sluice/internal/store/storetest"
	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/redistest"
)

// aclAdminPass is the default user's password on the servers of these
// tests: whoever lacks a password of their own gets nothing.
const aclAdminPass = "admin-secret"

// aclServer starts a private server whose default user needs
// aclAdminPass, and a client authenticated as that administrator.
func aclServer(t *testing.T) (*redistest.Server, rueidis.Client) {
	t.Helper()
	srv := privateServer(t, "--requirepass", aclAdminPass)
	return srv, authClient(t, srv.Addr(), "default", aclAdminPass)
}

// authClient connects to addr as user with password, or fails the test.
func authClient(tb testing.TB, addr, user, password string) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, Username: user, Password: password,
		ForceSingleClient: true, DisableCache: true, DialCtxFn: dialAddr})
	if err != nil {
		tb.Fatalf("connecting to %s as %s: %v", addr, user, err)
	}
	tb.Cleanup(c.Close)
	return c
}

// aclRule is the ACL docs/redis.md gives sluice's user, for a key prefix:
// every key under the prefix, every command but the dangerous ones (and
// ROLE, which a Sentinel or Cluster client asks), no Pub/Sub channel.
func aclRule(prefix string) []string {
	return []string{"on", "resetkeys", "~" + globPattern(prefix), "resetchannels", "+@all", "-@dangerous", "+role"}
}

// setUser creates (or redefines) an ACL user on the server adm
// administers, with the password and rule given.
func setUser(tb testing.TB, adm rueidis.Client, name, password string, rule []string) {
	tb.Helper()
	args := append([]string{"reset", ">" + password}, rule...)
	if err := adm.Do(ctx, adm.B().AclSetuser().Username(name).Rule(args...).Build()).Error(); err != nil {
		tb.Fatalf("ACL SETUSER %s %v: %v", name, args, err)
	}
}

var aclSeq atomic.Int64

// aclStore connects a Store as a user of its own, limited by aclRule to
// a prefix of its own, as docs/redis.md deploys sluice.
func aclStore(tb testing.TB, srv *redistest.Server, adm rueidis.Client, o Options) *Store {
	tb.Helper()
	n := aclSeq.Add(1)
	o.KeyPrefix = fmt.Sprintf("acl%d:", n)
	o.Username, o.Password = fmt.Sprintf("sluice%d", n), fmt.Sprintf("pw%d", n)
	setUser(tb, adm, o.Username, o.Password, aclRule(o.KeyPrefix))
	return newTestStore(tb, srv, o)
}

// TestACLConformance: the store passes the whole suite as an ACL user
// that may touch only the keys under its prefix and no dangerous command
// (every script, the key count, the admin commands).
func TestACLConformance(t *testing.T) {
	srv, adm := aclServer(t)
	storetest.Run(t, storetest.Backend{
		New: func(t *testing.T) limiter.Store {
			return &swept{Store: aclStore(t, srv, adm, Options{UseCallerTime: true}), t: t}
		},
		Capped: func(t *testing.T, evict bool) (limiter.Store, int) {
			srv, adm := aclServer(t)
			return capStore(t, evict, aclStore(t, srv, adm, Options{UseCallerTime: true}), adm)
		},
	})
}

// TestACLMarksAndLen: the control marks (a suspension, a learned limit)
// and the key count work for the limited user, on the same Redis as
// other users' keys it may not see.
func TestACLMarksAndLen(t *testing.T) {
	srv, adm := aclServer(t)
	if err := adm.Do(ctx, adm.B().Set().Key("other:x").Value("1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	s := aclStore(t, srv, adm, Options{})
	m := s.Marks()
	now := time.Now().Truncate(time.Millisecond)
	if err := m.Put(ctx, "relay *", "limit", limiter.Mark{Value: 12, Since: now}); err != nil {
		t.Fatal(err)
	}
	if ok, err := m.Add(ctx, "relay *", "suspend", limiter.Mark{Value: 1, Since: now, Expires: now.Add(time.Hour)}); !ok || err != nil {
		t.Fatalf("Add: %v %v", ok, err)
	}
	if list, err := m.List(ctx); err != nil || len(list) != 2 {
		t.Fatalf("List: %+v %v", list, err)
	}
	if err := m.Delete(ctx, "relay *", "suspend"); err != nil {
		t.Fatal(err)
	}
	if err := s.recount(ctx); err != nil || s.Len() != 1 {
		t.Fatalf("Len %d (%v), want 1: the limit mark, not the other user's key", s.Len(), err)
	}
}

// TestACLOtherUsers is the attack docs/security.md names: with sluice's
// keys behind an ACL user, neither a client without a password nor one
// authenticated as another ACL user (even one with every command) can
// suspend outbound mail or change a learned limit; and sluice's own user
// cannot reach beyond its prefix or run a dangerous command.
func TestACLOtherUsers(t *testing.T) {
	srv, adm := aclServer(t)
	s := aclStore(t, srv, adm, Options{})
	m := s.Marks()
	if err := m.Put(ctx, "relay *", "limit", limiter.Mark{Value: 12, Since: time.Now()}); err != nil {
		t.Fatal(err)
	}
	suspend, limit := m.rkey("relay *", "suspend"), m.rkey("relay *", "limit")
	setUser(t, adm, "other", "other-pw", aclRule("other:"))
	other := authClient(t, srv.Addr(), "other", "other-pw")
	for _, cmd := range []rueidis.Completed{
		other.B().Hset().Key(suspend).FieldValue().FieldValue("v", "1").FieldValue("s", "0").FieldValue("e", "0").Build(),
		other.B().Hset().Key(limit).FieldValue().FieldValue("v", "1000000").Build(),
		other.B().Del().Key(limit).Build(),
		other.B().Eval().Script("return redis.call('HSET', KEYS[1], 'v', '1')").Numkeys(1).Key(suspend).Build(),
		other.B().Flushall().Build(),
	} {
		what := strings.Join(cmd.Commands(), " ") // before Do, which recycles cmd
		err := other.Do(ctx, cmd).Error()
		if re, ok := serverError(err); !ok || !strings.HasPrefix(re.Error(), "NOPERM") {
			t.Errorf("another ACL user ran %s: %v, want NOPERM", what, err)
		}
	}
	raw := redisCLI(t, srv.Addr(), nil, "HSET", suspend, "v", "1", "s", "0", "e", "0")
	if !strings.Contains(raw, "NOAUTH") {
		t.Errorf("a client without a password: %q, want NOAUTH", raw)
	}
	if _, ok, err := m.Get(ctx, "relay *", "suspend"); ok || err != nil {
		t.Errorf("outbound mail suspended by someone else (%v)", err)
	}
	if got, ok, err := m.Get(ctx, "relay *", "limit"); !ok || err != nil || got.Value != 12 {
		t.Errorf("learned limit now %+v %v %v, want 12", got, ok, err)
	}
	own := authClient(t, srv.Addr(), s.opts.Username, s.opts.Password)
	for _, cmd := range []rueidis.Completed{
		own.B().Set().Key("other:x").Value("1").Build(),
		own.B().Flushall().Build(),
		own.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", "1").Build(),
	} {
		what := strings.Join(cmd.Commands(), " ") // before Do, which recycles cmd
		err := own.Do(ctx, cmd).Error()
		if re, ok := serverError(err); !ok || !strings.HasPrefix(re.Error(), "NOPERM") {
			t.Errorf("sluice's user ran %s: %v, want NOPERM", what, err)
		}
	}
}

// redisCLI runs redis-cli against addr ("unix:PATH" or host:port) as the
// test's user, or with cred (a real process of another user, with the
// groups given) when set, and returns its output, errors included.
func redisCLI(t *testing.T, addr string, cred *syscall.Credential, args ...string) string {
	t.Helper()
	cli := peer.Binary(t, "redis-tools", "redis-cli")
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		args = append([]string{"-s", path}, args...)
	} else {
		host, port, _ := strings.Cut(addr, ":")
		args = append([]string{"-h", host, "-p", port}, args...)
	}
	cmd := exec.Command(cli, args...)
	cmd.Env = []string{} // no REDISCLI_AUTH from the environment
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	out, _ := cmd.CombinedOutput()
	return strings.TrimSpace(string(out))
}

// nobody is the credential of the user nobody, in its own group and the
// groups given.
func nobody(t *testing.T, groups ...uint32) *syscall.Credential {
	t.Helper()
	u := peer.User(t, "nobody")
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		t.Fatalf("user nobody: uid %q gid %q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: groups}
}

// TestACLStartErrors: a wrong password, an unknown or disabled user, no
// credentials, and a user whose keys do not cover key_prefix each fail
// New at once with an error that says what to fix.
func TestACLStartErrors(t *testing.T) {
	srv, adm := aclServer(t)
	setUser(t, adm, "sluice", "right", aclRule("sluice:"))
	setUser(t, adm, "off", "right", append(aclRule("sluice:"), "off"))
	for _, c := range []struct {
		name, user, password, prefix string
		want                         []string
	}{
		{"wrong password", "sluice", "wrong", "sluice:", []string{`as user "sluice"`, "WRONGPASS", "username", "password"}},
		{"unknown user", "nobody", "right", "sluice:", []string{`as user "nobody"`, "WRONGPASS"}},
		{"disabled user", "off", "right", "sluice:", []string{`as user "off"`, "WRONGPASS"}},
		{"no credentials", "", "", "sluice:", []string{"NOAUTH", "username", "password"}},
		{"keys outside the user's", "sluice", "right", "mx:", []string{`user "sluice"`, "NOPERM", `~mx:*`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := Options{Addrs: []string{srv.Addr()}, Username: c.user, Password: c.password, KeyPrefix: c.prefix, Deadline: 2 * time.Second}
			s, err := New(ctx, o)
			if err == nil {
				s.Close()
				t.Fatal("started")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "Redis 7.0 or later") {
				t.Errorf("error %q blames the Redis version", err)
			}
		})
	}
}

// TestUnixSocket: sluice reaches Redis by its unix socket, and the
// socket's mode (unixsocketperm 660) is what keeps other local users out:
// nobody cannot connect, nobody in the socket's group can.
func TestUnixSocket(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil { // searchable: only the socket's mode decides
			t.Fatal(err)
		}
	}
	sock := filepath.Join(dir, "redis.sock")
	privateServer(t, "--unixsocket", sock, "--unixsocketperm", "660")
	o := Options{Addrs: []string{"unix:" + sock}, KeyPrefix: "unix:", Deadline: 2 * time.Second}
	s, err := New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out := make([]limiter.Decision, 1)
	for i := range 3 {
		if err := s.Hit(ctx, time.Now(), 1, limiter.Leaky, []limiter.Check{exactCheck("k", 2, time.Minute)}, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Allowed != (i < 2) {
			t.Fatalf("hit %d over the unix socket: %+v", i+1, out[0])
		}
	}
	peer.Root(t, "another user's connection to the socket")
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode %04o, want 0660", fi.Mode().Perm())
	}
	key := s.Marks().rkey("relay *", "suspend")
	if got := redisCLI(t, "unix:"+sock, nobody(t), "HSET", key, "v", "1", "s", "0", "e", "0"); !strings.Contains(got, "Permission denied") {
		t.Errorf("nobody through a 0660 socket of another group: %q, want Permission denied", got)
	}
	if _, ok, err := s.Marks().Get(ctx, "relay *", "suspend"); ok || err != nil {
		t.Errorf("nobody suspended outbound mail (%v)", err)
	}
	// In the socket's group (the recipe's: sluice in Redis's group), the
	// same user connects: the mode is what kept it out.
	gid := fi.Sys().(*syscall.Stat_t).Gid
	if got := redisCLI(t, "unix:"+sock, nobody(t, gid), "PING"); got != "PONG" {
		t.Errorf("nobody in the socket's group %d: %q, want PONG", gid, got)
	}
}

// TestACLSentinel: through Sentinels that have ACL users of their own
// (sentinel_username), sluice follows a master whose sluice user has the
// documented ACL; a wrong Sentinel user fails New.
func TestACLSentinel(t *testing.T) {
	master, adm := aclServer(t)
	tm := sentinelTiming
	tm.Conf = []string{
		"sentinel auth-pass guarded " + aclAdminPass,
		"user default off",
		"user watcher on >watch-pw +@all",
	}
	s, err := redistest.StartSentinel(t.TempDir(), "guarded", master, 1, tm)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	setUser(t, adm, "sluice", "pw", aclRule("sentinel:"))
	o := Options{Addrs: []string{s.Addr()}, MasterSet: "guarded", Username: "sluice", Password: "pw", KeyPrefix: "sentinel:",
		SentinelUsername: "intruder", SentinelPassword: "watch-pw", Deadline: 2 * time.Second, DialTimeout: time.Second}
	if st, err := New(ctx, o); err == nil {
		st.Close()
		t.Error("connected through a Sentinel as a user it does not have")
	}
	o.SentinelUsername = "watcher"
	st := openStore(t, o)
	if m := st.c.primary(); m != master.Addr() {
		t.Fatalf("store follows %q, want %s", m, master.Addr())
	}
	out := make([]limiter.Decision, 1)
	if err := st.Hit(ctx, time.Now(), 1, limiter.Leaky, senderChecks(1)[:1], out); err != nil || !out[0].Allowed {
		t.Fatalf("hit through the Sentinel's master as the ACL user: %v %+v", err, out[0])
	}
}

// TestACLCluster: on a Cluster whose every node has sluice's user with
// the documented rule, the store decides on keys of every master and
// counts its keys (ROLE on each node, SCAN on the masters).
func TestACLCluster(t *testing.T) {
	c := startCluster(t, 3, 0)
	for _, addr := range c.Addrs() {
		if _, err := redistest.Do(addr, append([]string{"ACL", "SETUSER", "sluice", "reset", ">pw"}, aclRule("cl:")...)...); err != nil {
			t.Fatalf("ACL SETUSER on %s: %v", addr, err)
		}
	}
	s := openStore(t, Options{Addrs: c.Addrs(), Cluster: true, Username: "sluice", Password: "pw", KeyPrefix: "cl:", Deadline: 2 * time.Second})
	out := make([]limiter.Decision, 1)
	for i := range 30 { // 30 keys: every master's slots, almost surely
		if err := s.Hit(ctx, time.Now(), 1, limiter.Leaky, []limiter.Check{exactCheck(fmt.Sprint("k", i), 2, time.Minute)}, out); err != nil || !out[0].Allowed {
			t.Fatalf("hit %d: %v %+v", i, err, out[0])
		}
	}
	if err := s.recount(ctx); err != nil || s.Len() != 30 {
		t.Fatalf("Len %d (%v), want 30", s.Len(), err)
	}
}
