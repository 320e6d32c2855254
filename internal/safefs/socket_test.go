package safefs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"sluice/internal/testutil/peer"
)

// TestAdjustSocket: a socket another process of sluice's bound (an
// upgrade passed it) gets the owner, group and mode asked for where they
// differ; one already right is left as it is; a link or anything but a
// socket is refused, never changed.
func TestAdjustSocket(t *testing.T) {
	peer.Root(t, "giving a socket another user and group")
	u := peer.User(t, "sluice")
	uid, gid := ids(t, u)
	dir := openTempDir(t)
	sock := filepath.Join(dir, "s")
	l, err := ListenUnix(sock, Owner{UID: -1, GID: -1}, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	stat := func(path string) syscall.Stat_t {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	failed, err := AdjustSocket(sock, Owner{UID: uid, GID: gid}, 0o660)
	if st := stat(sock); err != nil || len(failed) != 0 || int(st.Uid) != uid || int(st.Gid) != gid || st.Mode&0o7777 != 0o660 {
		t.Fatalf("adjusted: %v %v; uid %d gid %d mode %04o, want %d %d 0660", failed, err, st.Uid, st.Gid, st.Mode&0o7777, uid, gid)
	}
	if failed, err := AdjustSocket(sock, Owner{UID: -1, GID: -1}, 0o660); err != nil || len(failed) != 0 {
		t.Fatalf("nothing to change: %v %v", failed, err)
	}
	if st := stat(sock); int(st.Uid) != uid || int(st.Gid) != gid {
		t.Errorf("-1 changed the owner: uid %d gid %d", st.Uid, st.Gid)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(sock, link); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{file, link} {
		if _, err := AdjustSocket(path, Owner{UID: 0, GID: 0}, 0o666); err == nil {
			t.Errorf("%s: no error", path)
		}
	}
	if st := stat(file); st.Mode&0o7777 != 0o600 {
		t.Errorf("the regular file was changed: mode %04o", st.Mode&0o7777)
	}
	if st := stat(sock); int(st.Uid) != uid || st.Mode&0o7777 != 0o660 {
		t.Errorf("the socket behind the link was changed: uid %d mode %04o", st.Uid, st.Mode&0o7777)
	}
	// Given to sluice, it can be changed by sluice only in its mode: each
	// change that fails is named (TestAdjustSocketChild), the others made.
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(openTempDir(t), "safefs.test") // the build's directory is root's alone
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	as(t, u, "/usr/bin/env", "SAFEFS_ADJUST="+sock, bin, "-test.run=^TestAdjustSocketChild$")
	if st := stat(sock); int(st.Uid) != uid || int(st.Gid) != gid || st.Mode&0o7777 != 0o640 {
		t.Errorf("after the change as %s: uid %d gid %d mode %04o, want %d %d 0640", u.Username, st.Uid, st.Gid, st.Mode&0o7777, uid, gid)
	}
}

// TestAdjustSocketChild is TestAdjustSocket's process as the socket's
// owner, not root: it asks for root's owner and group and mode 0640.
func TestAdjustSocketChild(t *testing.T) {
	path := os.Getenv("SAFEFS_ADJUST")
	if path == "" {
		return // run by TestAdjustSocket only
	}
	failed, err := AdjustSocket(path, Owner{UID: 0, GID: 0}, 0o640)
	var names []string
	for _, f := range failed {
		names = append(names, f.Setting)
		if !errors.Is(f.Err, os.ErrPermission) {
			t.Errorf("%s: %v, not a permission error", f.Setting, f.Err)
		}
	}
	if err != nil || strings.Join(names, " ") != "group owner" {
		t.Errorf("AdjustSocket as uid %d: failed %v, %v; want group and owner refused", os.Getuid(), failed, err)
	}
}
