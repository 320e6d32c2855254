package cli

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/internal/testutil/peer"
)

// ownersFiles is a configuration naming every kind of file sluice reads
// besides its state: an include file, a class file, a policy rule's
// table, a Redis password file, and a socket unit for check.
func ownersFiles(state string) map[string]string {
	return map[string]string{
		"sluice.toml": `user = "sluice"
state_dir = "` + state + `"
include_dir = "conf.d"
classes_file = "xla.classes"
[policy]
enabled = true
listen = ["inet:127.0.0.1:10040"]
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
addrs = ["127.0.0.1:1"]
password_file = "redis.pass"
`,
		"conf.d/50-local.toml": "[milter]\nworkers = 3\n",
		"xla.classes":          "*    15    16\n",
		"senders.limits":       "monitor@example.org exempt\n",
		"redis.pass":           "s3cret\n",
		"policy.socket":        "[Socket]\nListenStream=127.0.0.1:10040\n",
	}
}

// writeOwnersTree writes files under a new directory every user can
// traverse, as root 0644 in root's 0755 directories (as the Debian
// package installs /etc/sluice), and returns it.
func writeOwnersTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := deployDir(t)
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestCheckFileOwners: sluice check run by root refuses, with exit 1
// and an error naming the path, its owner and its mode, each file that
// would steer a root start (or root's own check) when another user
// (nobody) owns it, or group or others may write it: the main file, an
// include file and the include directory, the class file, a rule's
// table, the Redis password file and a socket unit; root's 0644 files
// pass. Run by another user, check reads that user's own files as they
// are.
func TestCheckFileOwners(t *testing.T) {
	peer.Root(t, "files of another user need root to make")
	nobody := peer.User(t, "nobody")
	peer.User(t, "sluice")
	nuid, _ := strconv.Atoi(nobody.Uid)
	owned := ": owned by nobody (uid " + nobody.Uid + "), mode 0644: a file "
	chown := func(p string) error { return os.Chown(p, nuid, -1) }
	chmod := func(m os.FileMode) func(string) error { return func(p string) error { return os.Chmod(p, m) } }
	for _, c := range []struct {
		name, file string
		change     func(string) error
		want       string // after the file's path; "" for exit 0
	}{
		{"as installed", "", nil, ""},
		{"main file another user's", "sluice.toml", chown, owned},
		{"main file writable by all", "sluice.toml", chmod(0o646), ": owned by root (uid 0), mode 0646: a file root reads"},
		{"include file another user's", "conf.d/50-local.toml", chown, owned},
		{"include file group-writable", "conf.d/50-local.toml", chmod(0o664), ": owned by root (uid 0), mode 0664: a file root reads"},
		{"include directory another user's", "conf.d", chown, ": owned by nobody (uid " + nobody.Uid + "), mode 0755: a directory on the path"},
		{"class file another user's", "xla.classes", chown, owned},
		{"class file group-writable", "xla.classes", chmod(0o664), ": owned by root (uid 0), mode 0664"},
		{"table another user's", "senders.limits", chown, owned},
		{"table writable by all", "senders.limits", chmod(0o666), ": owned by root (uid 0), mode 0666"},
		{"password file another user's", "redis.pass", chown, owned + "sluice reads as sluice must belong to root or sluice"},
		{"password file group-writable", "redis.pass", chmod(0o660), ": owned by root (uid 0), mode 0660"},
		{"socket unit another user's", "policy.socket", chown, owned},
		{"socket unit group-writable", "policy.socket", chmod(0o664), ": owned by root (uid 0), mode 0664"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeOwnersTree(t, ownersFiles("/nonexistent/state"))
			if c.change != nil {
				if err := c.change(filepath.Join(dir, c.file)); err != nil {
					t.Fatal(err)
				}
			}
			code, out, errs := run("check", "-q", "-c", filepath.Join(dir, "sluice.toml"), "-socket-unit", filepath.Join(dir, "policy.socket"))
			if c.want == "" {
				if code != 0 {
					t.Fatalf("exit %d:\n%s%s", code, out, errs)
				}
				return
			}
			if want := filepath.Join(dir, c.file) + c.want; code != 1 || !strings.Contains(errs, want) || !strings.Contains(errs, "1 error(s)") {
				t.Errorf("exit %d:\n%s\nwant exit 1 and %q", code, errs, want)
			}
		})
	}

	t.Run("a user's own files", func(t *testing.T) {
		home := deployDir(t) // where nobody keeps state and sockets
		if err := os.Chown(home, nuid, -1); err != nil {
			t.Fatal(err)
		}
		files := ownersFiles(filepath.Join(home, "state"))
		files["sluice.toml"] = strings.Replace(files["sluice.toml"], "user = \"sluice\"\n", "", 1)
		dir := writeOwnersTree(t, files)
		var paths []string
		if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
			paths = append(paths, p)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for _, p := range paths {
			if err := os.Chown(p, nuid, -1); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(filepath.Join(dir, "xla.classes"), 0o666); err != nil {
			t.Fatal(err)
		}
		bin := buildSluice(t)
		for _, d := range []string{filepath.Dir(filepath.Dir(bin)), filepath.Dir(bin)} {
			if err := os.Chmod(d, 0o755); err != nil { // t.TempDir's are root's 0700
				t.Fatal(err)
			}
		}
		cmd := exec.Command(bin, "check", "-q", "-c", filepath.Join(dir, "sluice.toml"), "-socket-unit", filepath.Join(dir, "policy.socket"))
		cmd.SysProcAttr = credential(t, "nobody")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("check as nobody on nobody's files: %v\n%s", err, out)
		}
	})
}

// TestRootStartRefusesUntrustedFiles: sluice serve started by root with
// user = "sluice" refuses to start, naming the path, its owner and its
// mode, when a file that steers it belongs to another user (an include
// file that sets state_dir, the defect's attack; a rule's table that
// exempts that user's sender; the Redis password file), before it makes
// or gives away any directory; and a directory that existed before the
// start, root's, named as state_dir is not given to sluice: the start
// refuses it, naming it.
func TestRootStartRefusesUntrustedFiles(t *testing.T) {
	peer.Root(t, "the root phase runs as root")
	nobody := peer.User(t, "nobody")
	peer.User(t, "sluice")
	nuid, _ := strconv.Atoi(nobody.Uid)
	bin := buildSluice(t)
	owned := ": owned by nobody (uid " + nobody.Uid + "), mode 0644"
	for _, c := range []struct {
		name, file string // the file given to nobody ("" for none)
		existing   bool   // state_dir exists, root's 0750
		want       string // in the error, after the path of file (or of the state directory)
	}{
		{"include file another user's", "conf.d/50-local.toml", false, owned},
		{"table another user's", "senders.limits", false, owned},
		{"password file another user's", "redis.pass", false, owned},
		{"existing root state_dir", "", true, ": it exists (owner uid 0, group gid 0, mode 0750) and user sluice cannot write in it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := deployDir(t)
			state := filepath.Join(base, "state")
			dir := writeOwnersTree(t, ownersFiles(state))
			// The attacker's include names a root-owned directory as
			// the state directory: it must not become sluice's.
			if c.file == "conf.d/50-local.toml" {
				if err := os.WriteFile(filepath.Join(dir, c.file), []byte("state_dir = \""+state+"\"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if c.existing {
				if err := os.Mkdir(state, 0o750); err != nil {
					t.Fatal(err)
				}
			}
			path := state
			if c.file != "" {
				path = filepath.Join(dir, c.file)
				if err := os.Chown(path, nuid, -1); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "serve", "-c", filepath.Join(dir, "sluice.toml"))
			out, err := cmd.CombinedOutput()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), path+c.want) {
				t.Errorf("serve: %v\n%s\nwant exit 1 naming %s%s", err, out, path, c.want)
			}
			var st syscall.Stat_t
			if err := syscall.Stat(state, &st); err == nil && (!c.existing || st.Uid != 0) {
				t.Errorf("the state directory was made or given away: owner %d", st.Uid)
			}
		})
	}
}
