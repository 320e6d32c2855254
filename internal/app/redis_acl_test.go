package app

import (
	"bufio"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/config"
	"sluice/internal/testutil/peer"
	"sluice/internal/testutil/redistest"
)

// startRedisArgs starts a private redis-server with more arguments.
func startRedisArgs(t *testing.T, args ...string) *redistest.Server {
	t.Helper()
	srv, err := redistest.Start(t.TempDir(), 0, args...)
	if err != nil {
		if err == redistest.ErrNoRedis {
			peer.Missing(t, "redis-server", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	return srv
}

// askSender sends n policy requests for one sender and returns how many
// were let through (DUNNO).
func askSender(t *testing.T, d *Daemon, sender string, n int) int {
	t.Helper()
	c, err := net.Dial("tcp", d.Addrs()[0].String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	passed := 0
	for i := range n {
		v, err := policyAsk(c, r, sender, fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		if v == "DUNNO" {
			passed++
		}
	}
	return passed
}

// TestRedisACLUser runs the recipe of docs/redis.md: sluice as an ACL
// user limited to its key prefix, its password in password_file, on a
// Redis whose default user needs a password too. The daemon counts
// exactly (10 of 12 for one sender); with a wrong password or user it
// does not start, and says what to fix.
func TestRedisACLUser(t *testing.T) {
	srv := startRedisArgs(t, "--requirepass", "admin-secret")
	if _, err := redistest.DoAll(srv.Addr(), []string{"AUTH", "admin-secret"},
		[]string{"ACL", "SETUSER", "sluice", "on", ">s3cret", "resetkeys", "~mx:*", "resetchannels", "+@all", "-@dangerous", "+role"}); err != nil {
		t.Fatal(err)
	}
	store := func(user string) string {
		return fmt.Sprintf("addrs = [%q]\nusername = %q\npassword_file = \"redis.pass\"\nkey_prefix = \"mx:\"\ndeadline = \"1s\"\n", srv.Addr(), user)
	}
	path := redisStoreConfig(t, store("sluice"), senderPolicyDoor)
	pass := filepath.Join(filepath.Dir(path), "redis.pass")
	if err := os.WriteFile(pass, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, path)
	if got := askSender(t, d, "acl@example.org", 12); got != 10 {
		t.Fatalf("%d of 12 passed as the ACL user, want 10", got)
	}
	n, err := redistest.DoAll(srv.Addr(), []string{"AUTH", "admin-secret"}, []string{"SCAN", "0", "MATCH", "mx:*", "COUNT", "1000"})
	if err != nil || len(n[1].([]any)[1].([]any)) == 0 {
		t.Fatalf("no keys under mx: (%v): %v", err, n)
	}

	for _, c := range []struct{ name, user, password, want string }{
		{"wrong password", "sluice", "wrong", `Redis refused to authenticate sluice as user "sluice": check username and password (or password_file)`},
		{"wrong user", "mx", "s3cret", `Redis refused to authenticate sluice as user "mx"`},
	} {
		path := redisStoreConfig(t, store(c.user), senderPolicyDoor)
		if err := os.WriteFile(filepath.Join(filepath.Dir(path), "redis.pass"), []byte(c.password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, errs := config.Load(path)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		d, err := New(cfg, path, slog.New(slog.DiscardHandler), nil)
		if err == nil {
			d.Shutdown(t.Context())
			t.Errorf("%s: the daemon started", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// TestRedisUnixSocketStore: a daemon whose store is Redis's unix socket
// (addrs = ["unix:PATH"]) counts there.
func TestRedisUnixSocketStore(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redis.sock")
	startRedisArgs(t, "--unixsocket", sock, "--unixsocketperm", "660")
	d := startDaemon(t, redisStoreConfig(t, fmt.Sprintf("addrs = [%q]\nkey_prefix = \"sock:\"\ndeadline = \"1s\"\n", "unix:"+sock), senderPolicyDoor))
	if got := askSender(t, d, "unix@example.org", 12); got != 10 {
		t.Fatalf("%d of 12 passed through the unix socket, want 10", got)
	}
}
