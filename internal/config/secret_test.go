package config

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"sluice/internal/testutil/peer"
)

// loadWarnings writes text as a configuration of the given mode in dir
// and returns its StoreWarnings.
func loadWarnings(t *testing.T, dir, name, text string, mode os.FileMode) []string {
	t.Helper()
	path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	c, errs := Load(path)
	if len(errs) > 0 {
		t.Fatalf("%s: %v", name, errs)
	}
	return StoreWarnings(path, c)
}

func TestSecretWarning(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, text string
		mode       os.FileMode
		warn       bool
	}{
		{"password, world-readable", "[store.redis]\npassword = \"s3cret\"\n", 0o644, true},
		{"sentinel password, world-readable", "[store.redis]\nsentinel_password = \"s3cret\"\n", 0o604, true},
		{"password, group only", "[store.redis]\npassword = \"s3cret\"\n", 0o640, false},
		{"no password, world-readable", "[store.redis]\npassword_file = \"/etc/sluice/redis.pass\"\n", 0o644, false},
	} {
		w := loadWarnings(t, dir, tc.name, tc.text, tc.mode)
		if (len(w) != 0) != tc.warn || (tc.warn && (len(w) != 1 || !strings.Contains(w[0], "every user may read it"))) {
			t.Errorf("%s: %q", tc.name, w)
		}
	}
	if w := StoreWarnings("", Default()); len(w) != 0 {
		t.Errorf("the embedded defaults: %q", w)
	}
}

// TestRedisWithoutPassword: a Redis store reached over TCP without a
// password draws the warning that whoever reaches it steers sluice; a
// password (inline or in a file) or a unix socket does not.
func TestRedisWithoutPassword(t *testing.T) {
	dir := t.TempDir()
	pass := filepath.Join(dir, "redis.pass")
	if err := os.WriteFile(pass, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const store = "[store]\nkind = \"redis\"\n[store.redis]\n"
	for _, tc := range []struct {
		name, text string
		warn       string
	}{
		{"tcp", store + "addrs = [\"127.0.0.1:6379\"]\n", "Redis at 127.0.0.1:6379 is reached over TCP without a password: any local user"},
		{"sentinels", store + "addrs = [\"10.0.0.5:26379\", \"10.0.0.6:26379\"]\nmaster_set = \"m\"\nsentinel_password = \"x\"\n", "Redis at 10.0.0.5:26379, 10.0.0.6:26379 is reached over TCP without a password"},
		{"username only", store + "addrs = [\"127.0.0.1:6379\"]\nusername = \"sluice\"\n", "without a password"},
		{"password", store + "addrs = [\"127.0.0.1:6379\"]\nusername = \"sluice\"\npassword = \"s3cret\"\n", ""},
		{"password file", store + "addrs = [\"127.0.0.1:6379\"]\nusername = \"sluice\"\npassword_file = \"redis.pass\"\n", ""},
		{"unix socket", store + "addrs = [\"unix:/run/redis/redis-server.sock\"]\n", ""},
		{"memory store", "[store]\nkind = \"memory\"\n", ""},
	} {
		w := loadWarnings(t, dir, tc.name, tc.text, 0o600)
		if tc.warn == "" && len(w) != 0 || tc.warn != "" && (len(w) != 1 || !strings.Contains(w[0], tc.warn)) {
			t.Errorf("%s: %q, want %q", tc.name, w, tc.warn)
		}
	}
}

// TestPasswordFileWarning: a password_file (or sentinel_password_file)
// that others may read, or a group that is not sluice's own, draws a
// warning naming the file, its owner, group and mode; 0600, or 0640
// with sluice's group, does not.
func TestPasswordFileWarning(t *testing.T) {
	dir := t.TempDir()
	pass := filepath.Join(dir, "redis.pass")
	if err := os.WriteFile(pass, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const store = "[store]\nkind = \"redis\"\n[store.redis]\naddrs = [\"127.0.0.1:6379\"]\npassword_file = \"redis.pass\"\n"
	sentinels := "[store]\nkind = \"redis\"\n[store.redis]\naddrs = [\"127.0.0.1:26379\"]\nmaster_set = \"m\"\npassword = \"x\"\nsentinel_password_file = \"redis.pass\"\n"
	check := func(name, text string, mode os.FileMode, want string) {
		t.Helper()
		if err := os.Chmod(pass, mode); err != nil {
			t.Fatal(err)
		}
		w := loadWarnings(t, dir, name, text, 0o600)
		if want == "" && len(w) != 0 || want != "" && (len(w) != 1 || !strings.Contains(w[0], want)) {
			t.Errorf("%s: %q, want %q", name, w, want)
		}
	}
	check("0600", store, 0o600, "")
	check("0644", store, 0o644, "store.redis.password_file: every user may read "+pass)
	check("0604", store, 0o604, "every user may read")
	check("sentinel 0644", sentinels, 0o644, "store.redis.sentinel_password_file: every user may read")
	check("0640, own group", store, 0o640, "") // the file's group is this user's: the one sluice runs as

	peer.Root(t, "files of other groups")
	bin := peer.Group(t, "bin") // Debian's base-passwd: user bin, primary group bin
	nogroup := peer.Group(t, "nogroup")
	peer.User(t, "nobody")
	chgrp := func(g string) {
		t.Helper()
		gid, _ := strconv.Atoi(g)
		if err := os.Chown(pass, 0, gid); err != nil {
			t.Fatal(err)
		}
	}
	chgrp(nogroup.Gid)
	check("0640, a shared group", store, 0o640, "store.redis.password_file: group nogroup may read "+pass+" (owner root, group nogroup, mode 0640)")
	// root:bin 0640, checked by root with no user: another user's
	// private group is warned of; only the system user sluice's passes
	// (the package's unit runs as sluice).
	chgrp(bin.Gid)
	check("0640, another user's private group", store, 0o640, "group bin may read")
	sl := peer.User(t, "sluice")
	chgrp(sl.Gid)
	check("0640, sluice's group", store, 0o640, "")
	// With user = "nobody", only nobody's group (nogroup) passes.
	check("0640, not the daemon's group", "user = \"nobody\"\n"+store, 0o640, "group sluice may read")
	chgrp(nogroup.Gid)
	check("0640, the daemon's group", "user = \"nobody\"\n"+store, 0o640, "")
}
