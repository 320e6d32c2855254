package cli

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"sluice/internal/testutil/peer"
)

// TestPidFile: -pidfile's file is written with this process's pid,
// mode 0644, in place of a symbolic link without writing through it;
// as root, a directory another user may write in is refused (that user
// could make root's init script signal any process); the removal leaves
// a file naming another pid (an upgrade's) alone, and removes its own.
func TestPidFile(t *testing.T) {
	peer.Root(t, "the pid file's rules are root's")
	own := strconv.Itoa(os.Getpid()) + "\n"
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.pid")

	target := filepath.Join(dir, "target")
	writeText(t, target, "keep\n")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	if err := writePidFile(path); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep\n" {
		t.Errorf("the link's target was written: %q", b)
	}
	st, err := os.Lstat(path)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o644 {
		t.Fatalf("the pid file: %v %v", st.Mode(), err)
	}
	if b, _ := os.ReadFile(path); string(b) != own {
		t.Errorf("the pid file holds %q, want %q", b, own)
	}

	writeText(t, path, "1\n") // an upgrade's process wrote its pid
	if err := removePidFile(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the removal took another process's pid file: %v", err)
	}
	writeText(t, path, own)
	if err := removePidFile(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the pid file outlived its removal: %v", err)
	}
	if err := removePidFile(path); err != nil {
		t.Errorf("removing a missing pid file: %v", err)
	}

	open := filepath.Join(dir, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	chownNames(t, open, "nobody", "nogroup")
	if err := writePidFile(filepath.Join(open, "sluice.pid")); err == nil || !strings.Contains(err.Error(), "must belong to root") {
		t.Errorf("a pid file in a directory nobody may write in: %v", err)
	}
	if err := writePidFile("run/sluice.pid"); err == nil || !strings.Contains(err.Error(), "absolute") {
		t.Errorf("a relative pid file: %v", err)
	}
}
