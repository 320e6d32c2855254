package config

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"sluice/internal/testutil/peer"
)

// ownersTree is a configuration with an include directory, a class file,
// a policy rule's table and a Redis password file, all written by root
// 0644 in root's 0755 directories, as an administrator installs them.
var ownersTree = map[string]string{
	"sluice.toml": `include_dir = "conf.d"
classes_file = "xla.classes"
[policy]
enabled = true
[[policy.rule]]
name = "sender-rate"
count = "messages"
stage = "END-OF-MESSAGE"
key = ["sender"]
limit = ["10/60s exact"]
table = "senders.limits"
[store]
kind = "redis"
[store.redis]
addrs = ["127.0.0.1:6379"]
password_file = "redis.pass"
tls = true
tls_ca_file = "ca.pem"
`,
	"conf.d/50-local.toml": "[milter]\nworkers = 3\n",
	"xla.classes":          "*    15    16\n",
	"senders.limits":       "monitor@example.org exempt\n",
	"redis.pass":           "s3cret\n",
	"ca.pem":               "-----BEGIN CERTIFICATE-----\n",
}

// TestFileOwners: sluice loaded by root refuses each file that steers it
// (the main file, an include file, the include directory, the class
// file, a rule's table, the Redis password and CA files) when another user owns
// it or group or others may write it, naming the path, its owner and its
// mode; root's 0644 files pass, and so does a password file of the
// daemon's own user (it alone reads it, after the root start).
func TestFileOwners(t *testing.T) {
	peer.Root(t, "files of another user need root to make")
	nobody := peer.User(t, "nobody")
	sluice := peer.User(t, "sluice")
	nuid, _ := strconv.Atoi(nobody.Uid)
	suid, _ := strconv.Atoi(sluice.Uid)
	owned := "owned by nobody (uid " + nobody.Uid + "), mode 0644"
	chown := func(uid int) func(string) error { return func(p string) error { return os.Chown(p, uid, -1) } }
	chmod := func(m os.FileMode) func(string) error { return func(p string) error { return os.Chmod(p, m) } }
	for _, c := range []struct {
		name, file string // the file changed, relative to the tree
		change     func(path string) error
		user       string // user = ..., "" for none
		want       string // in the one error; "" for none
	}{
		{"as installed", "", nil, "", ""},
		{"as installed, with a user", "", nil, "sluice", ""},
		{"main file another user's", "sluice.toml", chown(nuid), "", owned},
		{"main file 0666", "sluice.toml", chmod(0o666), "", "sluice.toml: owned by root (uid 0), mode 0666"},
		{"include file another user's", "conf.d/50-local.toml", chown(nuid), "", owned},
		{"include file group-writable", "conf.d/50-local.toml", chmod(0o664), "", "50-local.toml: owned by root (uid 0), mode 0664"},
		{"include directory another user's", "conf.d", chown(nuid), "", "conf.d: owned by nobody (uid " + nobody.Uid + "), mode 0755: a directory"},
		{"include directory writable by all", "conf.d", chmod(0o777), "", "conf.d: owned by root (uid 0), mode 0777: a directory"},
		{"class file another user's", "xla.classes", chown(nuid), "", owned},
		{"class file writable by all", "xla.classes", chmod(0o646), "", "xla.classes: owned by root (uid 0), mode 0646"},
		{"table another user's", "senders.limits", chown(nuid), "", owned},
		{"table group-writable", "senders.limits", chmod(0o664), "", "senders.limits: owned by root (uid 0), mode 0664"},
		{"password file another user's", "redis.pass", chown(nuid), "", owned},
		{"password file another user's, with a user", "redis.pass", chown(nuid), "sluice", owned + ": a file sluice reads as sluice must belong to root or sluice"},
		{"password file group-writable", "redis.pass", chmod(0o660), "sluice", "redis.pass: owned by root (uid 0), mode 0660"},
		{"CA file another user's", "ca.pem", chown(nuid), "", owned},
		{"CA file writable by all, with a user", "ca.pem", chmod(0o646), "sluice", "ca.pem: owned by root (uid 0), mode 0646"},
		{"password file the daemon's, with that user", "redis.pass", chown(suid), "sluice", ""},
		{"password file the daemon's, without a user", "redis.pass", chown(suid), "", "owned by sluice (uid " + sluice.Uid + ")"},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := map[string]string{}
			for k, v := range ownersTree {
				files[k] = v
			}
			if c.user != "" {
				files["sluice.toml"] = "user = " + strconv.Quote(c.user) + "\n" + files["sluice.toml"]
			}
			dir := writeTree(t, files)
			if c.change != nil {
				if err := c.change(filepath.Join(dir, c.file)); err != nil {
					t.Fatal(err)
				}
			}
			cfg, errs := Load(filepath.Join(dir, "sluice.toml"))
			if len(errs) == 0 {
				errs = cfg.CheckFileOwners()
			}
			if c.want == "" {
				if len(errs) > 0 {
					t.Fatalf("refused: %v", errs)
				}
				return
			}
			if len(errs) != 1 {
				t.Fatalf("%d errors, want 1 with %q: %v", len(errs), c.want, errs)
			}
			if got := errs[0].Error(); !strings.Contains(got, c.want) || !strings.Contains(got, filepath.Join(dir, c.file)+": owned by") || !strings.Contains(got, "must belong to root") {
				t.Errorf("%s\nwant it to name %s and %q", got, filepath.Join(dir, c.file), c.want)
			}
		})
	}
}
