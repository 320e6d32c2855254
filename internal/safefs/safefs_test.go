package safefs

import (
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"sluice/internal/testutil/peer"
)

// ids is a user's uid and primary gid.
func ids(t *testing.T, u *user.User) (int, int) {
	t.Helper()
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		t.Fatalf("user %s: uid %q gid %q", u.Username, u.Uid, u.Gid)
	}
	return uid, gid
}

// as runs argv as user u (the attacker's step: a real process of that
// user, so the kernel's permission checks are the ones an attacker
// meets) and fails the test if it fails.
func as(t *testing.T, u *user.User, argv ...string) {
	t.Helper()
	uid, gid := ids(t, u)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("as %s: %v: %v\n%s", u.Username, argv, err, out)
	}
}

// openTempDir is t.TempDir made traversable by every user (t.TempDir's
// parent is 0700), so that another user's process can work below it.
func openTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// victim is a root-only file outside the attacker's directory; the
// returned check fails the test if anything about it changed.
func victim(t *testing.T) (string, func()) {
	t.Helper()
	path := filepath.Join(openTempDir(t), "root-only")
	const body = "root's secret\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, func() {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(path)
		if st.Mode&0o7777 != 0o600 || st.Uid != 0 || st.Gid != 0 || string(b) != body {
			t.Errorf("root's file changed: mode %04o owner %d:%d content %q", st.Mode&0o7777, st.Uid, st.Gid, b)
		}
	}
}

// attackerDir is a directory owned by u (as sluice's runtime directory
// is, once root gave it to the daemon's user), traversable by all.
func attackerDir(t *testing.T, u *user.User) string {
	t.Helper()
	dir := filepath.Join(openTempDir(t), "run")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	uid, gid := ids(t, u)
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestListenUnixSwapAfterBind: the attack of issue 25 made
// deterministic. Root binds a socket in a directory the daemon's user
// owns; exactly between the bind and the change of mode, that user
// renames a symbolic link to a root-only file over the socket. The
// socket's mode must not reach the file: ListenUnix refuses, and the
// file is unchanged. (The code before safefs chmodded the path and gave
// the file mode 0660.)
func TestListenUnixSwapAfterBind(t *testing.T) {
	peer.Root(t, "the attack is root changing a file another user points it at")
	attacker := peer.User(t, "sluice")
	target, unchanged := victim(t)
	dir := attackerDir(t, attacker)
	sock := filepath.Join(dir, "policy")
	as(t, attacker, "ln", "-s", target, filepath.Join(dir, "prepared"))
	afterBind = func(path string) { as(t, attacker, "mv", "-f", filepath.Join(dir, "prepared"), path) }
	t.Cleanup(func() { afterBind = nil })
	uid, gid := ids(t, attacker)
	l, err := ListenUnix(sock, Owner{UID: uid, GID: gid}, 0o666)
	if err == nil {
		l.Close()
		t.Fatal("ListenUnix succeeded on a swapped socket")
	}
	if !strings.Contains(err.Error(), "replaced between bind and chmod") {
		t.Errorf("error %q does not say what happened", err)
	}
	unchanged()
}

// TestListenUnixOwnerAndMode: without an attacker the socket gets the
// owner and exact mode asked (bound with none first), and a stale socket
// left by a dead server is replaced; a regular file in its place is not.
func TestListenUnixOwnerAndMode(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s")
	for range 2 { // the second time over the first's stale file
		l, err := ListenUnix(sock, Owner{UID: -1, GID: os.Getegid()}, 0o640)
		if err != nil {
			t.Fatal(err)
		}
		var st unix.Stat_t
		if err := unix.Lstat(sock, &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFSOCK || st.Mode&0o7777 != 0o640 || int(st.Uid) != os.Geteuid() || int(st.Gid) != os.Getegid() {
			t.Errorf("socket mode %o owner %d:%d", st.Mode, st.Uid, st.Gid)
		}
		l.SetUnlinkOnClose(false)
		l.Close()
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ListenUnix(file, Owner{UID: -1, GID: -1}, 0o600); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("over a regular file: %v", err)
	}
}

// TestOpenDirLinks: a symbolic link is followed only where nobody but
// root (or this process's user) could have put it: a link another user
// owns, or any link in a directory others may write, is refused.
func TestOpenDirLinks(t *testing.T) {
	peer.Root(t, "links owned by another user need root to make")
	other := peer.User(t, "sluice")
	real := t.TempDir()
	base := t.TempDir()
	if err := os.Symlink(real, filepath.Join(base, "mine")); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(filepath.Join(base, "mine"))
	if err != nil {
		t.Fatalf("root's link in root's directory: %v", err)
	}
	d.Close()

	adir := attackerDir(t, other)
	as(t, other, "ln", "-s", "/etc", filepath.Join(adir, "planted"))
	if _, err := OpenDir(filepath.Join(adir, "planted")); !errors.Is(err, ErrUntrustedLink) {
		t.Errorf("another user's link: %v, want ErrUntrustedLink", err)
	}
	if _, err := Open(filepath.Join(adir, "planted", "passwd"), 1<<20); !errors.Is(err, ErrUntrustedLink) {
		t.Errorf("another user's link to a file's directory: %v", err)
	}
	as(t, other, "ln", "-s", "/etc/passwd", filepath.Join(adir, "cfg"))
	if _, err := ReadFile(filepath.Join(adir, "cfg"), 1<<20); !errors.Is(err, ErrUntrustedLink) {
		t.Errorf("another user's link as the file: %v", err)
	}

	open := t.TempDir()
	if err := os.Chmod(open, 0o777); err != nil { // writable by all, no sticky bit
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(open, "root-link")); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDir(filepath.Join(open, "root-link")); !errors.Is(err, ErrUntrustedLink) {
		t.Errorf("root's link in a world-writable directory: %v", err)
	}
}

// TestMkdirAllMode: the directory made gets exactly the mode asked,
// whatever the umask; one that exists keeps its own.
func TestMkdirAllMode(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	p := filepath.Join(t.TempDir(), "a", "b")
	d, created, err := MkdirAll(p, 0o755)
	if err != nil || !created {
		t.Fatalf("MkdirAll: %v, created %v", err, created)
	}
	d.Close()
	if fi, _ := os.Stat(p); fi == nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", fi.Mode())
	}
	if err := os.Chmod(p, 0o700); err != nil {
		t.Fatal(err)
	}
	d, created, err = MkdirAll(p, 0o755)
	if err != nil || created {
		t.Fatalf("again: %v, created %v", err, created)
	}
	d.Close()
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o700 {
		t.Errorf("an existing directory's mode changed to %v", fi.Mode())
	}
}

// TestOpenRegularKinds: only a regular file is opened; the rest is
// refused by name before any open (a FIFO would block, a device could
// act on open).
func TestOpenRegularKinds(t *testing.T) {
	dir := t.TempDir()
	mk := map[string]func(string) error{
		"link": func(p string) error { return os.Symlink("/etc/hostname", p) },
		"fifo": func(p string) error { return unix.Mkfifo(p, 0o600) },
		"dir":  func(p string) error { return os.Mkdir(p, 0o700) },
		"file": func(p string) error { return os.WriteFile(p, []byte("12345"), 0o600) },
	}
	for name, f := range mk {
		if err := f(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, name := range []string{"link", "fifo", "dir"} {
		if _, err := d.OpenRegular(name, 0); !errors.Is(err, ErrNotRegular) {
			t.Errorf("%s: %v, want ErrNotRegular", name, err)
		}
	}
	if _, err := d.ReadFile("file", 4); !errors.Is(err, ErrTooLarge) {
		t.Errorf("5 bytes read with a cap of 4: %v", err)
	}
	if b, err := d.ReadFile("file", 5); err != nil || string(b) != "12345" {
		t.Errorf("file: %q, %v", b, err)
	}
	if _, err := d.OpenRegular("../x", 0); err == nil {
		t.Error("a name with a slash was accepted")
	}
}

// TestHandOver: a state file an earlier run left as root is given to
// the daemon's user only when it is a regular file with one link; a
// hard link to another root file (which would give that file away) and
// a symbolic link are left alone.
func TestHandOver(t *testing.T) {
	peer.Root(t, "handing a file over is chown")
	u := peer.User(t, "sluice")
	uid, gid := ids(t, u)
	dir := t.TempDir()
	target, unchanged := victim(t)
	if err := os.WriteFile(filepath.Join(dir, "old"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(target, filepath.Join(dir, "hard")); err != nil {
		t.Fatalf("hard link to the victim (both under the test's temporary directory): %v", err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "soft")); err != nil {
		t.Fatal(err)
	}
	d, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for name, want := range map[string]bool{"old": true, "hard": false, "soft": false, "missing": false} {
		got, err := d.HandOver(name, uid, gid)
		if err != nil || got != want {
			t.Errorf("%s: handed over %v (%v), want %v", name, got, err, want)
		}
	}
	if err := os.Remove(filepath.Join(dir, "hard")); err != nil {
		t.Fatal(err)
	}
	unchanged()
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "old"), &st); err != nil || int(st.Uid) != uid {
		t.Errorf("old: owner %d (%v), want %d", st.Uid, err, uid)
	}
}

// TestOpenRegularSwapBeforeOpen: a regular file swapped for a FIFO (by
// its owner, the daemon's user) between the check of the name and the
// open is still refused, and the open does not block: the descriptor is
// opened non-blocking and checked again.
func TestOpenRegularSwapBeforeOpen(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "store.snapshot")
	if err := os.WriteFile(p, []byte("SLUICEMS"), 0o600); err != nil {
		t.Fatal(err)
	}
	beforeOpen = func(path string) {
		if err := os.Remove(path); err != nil {
			t.Error(err)
		}
		if err := unix.Mkfifo(path, 0o600); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { beforeOpen = nil })
	if _, err := OpenState(p, 1<<20); !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), "FIFO") {
		t.Errorf("swapped for a FIFO: %v, want ErrNotRegular naming the FIFO", err)
	}
}
