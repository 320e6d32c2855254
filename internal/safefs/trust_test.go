package safefs

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"sluice/internal/testutil/peer"
)

// TestJudge: the one judge of what root may be steered by, on the
// status of files and directories: owner, mode and kind.
func TestJudge(t *testing.T) {
	const sluice = 4242 // the daemon's user, when allowed
	for _, c := range []struct {
		name string
		mode uint32
		uid  uint32
		also int
		dir  bool
		want error // nil, ErrNotTrusted, ErrNotRegular, or errAny
	}{
		{"root 0644", unix.S_IFREG | 0o644, 0, -1, false, nil},
		{"root 0600", unix.S_IFREG | 0o600, 0, -1, false, nil},
		{"root 0640", unix.S_IFREG | 0o640, 0, -1, false, nil},
		{"root 0444 setuid", unix.S_IFREG | 0o4444, 0, -1, false, nil},
		{"root group-writable", unix.S_IFREG | 0o664, 0, -1, false, ErrNotTrusted},
		{"root other-writable", unix.S_IFREG | 0o646, 0, -1, false, ErrNotTrusted},
		{"root 0666", unix.S_IFREG | 0o666, 0, -1, false, ErrNotTrusted},
		{"another user's 0644", unix.S_IFREG | 0o644, 65534, -1, false, ErrNotTrusted},
		{"another user's 0400", unix.S_IFREG | 0o400, 65534, -1, false, ErrNotTrusted},
		{"the daemon's 0640, allowed", unix.S_IFREG | 0o640, sluice, sluice, false, nil},
		{"the daemon's 0640, not allowed", unix.S_IFREG | 0o640, sluice, -1, false, ErrNotTrusted},
		{"the daemon's 0660, allowed", unix.S_IFREG | 0o660, sluice, sluice, false, ErrNotTrusted},
		{"another user's, the daemon's allowed", unix.S_IFREG | 0o640, 65534, sluice, false, ErrNotTrusted},
		{"sticky file other-writable", unix.S_IFREG | 0o1666, 0, -1, false, ErrNotTrusted},
		{"FIFO", unix.S_IFIFO | 0o644, 0, -1, false, ErrNotRegular},
		{"symbolic link", unix.S_IFLNK | 0o777, 0, -1, false, ErrNotRegular},
		{"character device", unix.S_IFCHR | 0o644, 0, -1, false, ErrNotRegular},
		{"socket", unix.S_IFSOCK | 0o644, 0, -1, false, ErrNotRegular},
		{"directory as the file", unix.S_IFDIR | 0o755, 0, -1, false, ErrNotRegular},
		{"dir root 0755", unix.S_IFDIR | 0o755, 0, -1, true, nil},
		{"dir root 0700", unix.S_IFDIR | 0o700, 0, -1, true, nil},
		{"dir root 1777 (sticky)", unix.S_IFDIR | 0o1777, 0, -1, true, nil},
		{"dir root 0775", unix.S_IFDIR | 0o775, 0, -1, true, ErrNotTrusted},
		{"dir root 0777", unix.S_IFDIR | 0o777, 0, -1, true, ErrNotTrusted},
		{"dir another user's 0755", unix.S_IFDIR | 0o755, 65534, -1, true, ErrNotTrusted},
		{"dir another user's 1777", unix.S_IFDIR | 0o1777, 65534, -1, true, ErrNotTrusted},
		{"dir the daemon's 0750, allowed", unix.S_IFDIR | 0o750, sluice, sluice, true, nil},
		{"dir the daemon's 0750, not allowed", unix.S_IFDIR | 0o750, sluice, -1, true, ErrNotTrusted},
		{"file as a directory", unix.S_IFREG | 0o755, 0, -1, true, errAny},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := unix.Stat_t{Mode: c.mode, Uid: c.uid}
			err := judge("/etc/sluice/x", &st, c.also, c.dir)
			switch {
			case c.want == nil && err != nil:
				t.Errorf("refused: %v", err)
			case c.want == errAny && err == nil, c.want != nil && c.want != errAny && !errors.Is(err, c.want):
				t.Errorf("%v, want %v", err, c.want)
			case err != nil && !strings.HasPrefix(err.Error(), "/etc/sluice/x: "):
				t.Errorf("%q does not start with the path", err)
			}
			var ue *UntrustedError
			if errors.As(err, &ue) {
				if ue.UID != int(c.uid) || ue.Mode != c.mode&0o7777 || ue.Dir != c.dir {
					t.Errorf("%+v does not say what was found", ue)
				}
			}
		})
	}
}

// errAny stands for any error in TestJudge's table.
var errAny = errors.New("any error")

// TestUntrustedMessage: the refusal names the path, its owner by name
// and uid, and its mode, and says the rule.
func TestUntrustedMessage(t *testing.T) {
	nobody := peer.User(t, "nobody")
	uid, _ := ids(t, nobody)
	st := unix.Stat_t{Mode: unix.S_IFREG | 0o644, Uid: uint32(uid)}
	err := judge("/etc/sluice/conf.d/x.toml", &st, -1, false)
	want := "/etc/sluice/conf.d/x.toml: owned by nobody (uid " + strconv.Itoa(uid) + "), mode 0644: a file root reads must belong to root and not be writable by group or others"
	if err == nil || err.Error() != want {
		t.Errorf("%v\nwant %s", err, want)
	}
	st.Mode = unix.S_IFDIR | 0o777
	st.Uid = 0
	err = judge("/etc/sluice", &st, -1, true)
	if err == nil || !strings.Contains(err.Error(), "/etc/sluice: owned by root (uid 0), mode 0777: a directory on the path of a file root reads must belong to root") {
		t.Errorf("directory: %v", err)
	}
}

// TestReadTrusted: root reads a file only when it and every directory on
// its path (each link followed included) are root's and writable by
// nobody else; each refusal names the path, owner and mode; the files
// pass that an administrator installs (root 0644, 0600, in root's 0755
// directories, through root's links), and a FIFO is refused without
// blocking.
func TestReadTrusted(t *testing.T) {
	peer.Root(t, "files of another user need root to make")
	nobody := peer.User(t, "nobody")
	nuid, ngid := ids(t, nobody)
	base := t.TempDir()
	path := func(p string) string { return filepath.Join(base, p) }
	mkdir := func(p string, mode uint32, uid int) {
		if err := os.Mkdir(path(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := unix.Chmod(path(p), mode); err != nil { // os.Chmod takes no sticky bit as 0o1000
			t.Fatal(err)
		}
		if err := os.Chown(path(p), uid, 0); err != nil {
			t.Fatal(err)
		}
	}
	file := func(p string, mode os.FileMode, uid, gid int) {
		if err := os.WriteFile(path(p), []byte("x = 1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(path(p), uid, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path(p), mode); err != nil {
			t.Fatal(err)
		}
	}
	mkdir("etc", 0o755, 0)
	file("etc/root0644", 0o644, 0, 0)
	file("etc/root0600", 0o600, 0, 0)
	file("etc/nobody", 0o644, nuid, ngid)
	file("etc/group-w", 0o664, 0, 0)
	file("etc/other-w", 0o646, 0, 0)
	if err := os.Symlink(path("etc/root0644"), path("etc/link-root")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(path("etc/nobody"), path("etc/link-nobody")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(path("etc/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	mkdir("theirs", 0o755, nuid)
	file("theirs/root0644", 0o644, 0, 0)
	mkdir("open", 0o777, 0)
	file("open/root0644", 0o644, 0, 0)
	mkdir("sticky", 0o1777, 0)
	file("sticky/root0644", 0o644, 0, 0)

	for _, c := range []struct {
		file, refused string // refused: the path the error names ("" to pass)
		want          error
	}{
		{"etc/root0644", "", nil},
		{"etc/root0600", "", nil},
		{"etc/link-root", "", nil},
		{"sticky/root0644", "", nil},
		{"etc/nobody", "etc/nobody: owned by nobody (uid " + strconv.Itoa(nuid) + "), mode 0644", ErrNotTrusted},
		{"etc/link-nobody", "etc/nobody: owned by nobody", ErrNotTrusted},
		{"etc/group-w", "etc/group-w: owned by root (uid 0), mode 0664", ErrNotTrusted},
		{"etc/other-w", "etc/other-w: owned by root (uid 0), mode 0646", ErrNotTrusted},
		{"theirs/root0644", "theirs: owned by nobody (uid " + strconv.Itoa(nuid) + "), mode 0755: a directory", ErrNotTrusted},
		{"open/root0644", "open: owned by root (uid 0), mode 0777: a directory", ErrNotTrusted},
		{"etc/fifo", "etc/fifo", ErrNotRegular},
	} {
		t.Run(c.file, func(t *testing.T) {
			b, err := ReadTrusted(path(c.file), 1<<20)
			f, oerr := OpenTrusted(path(c.file), 1<<20)
			if oerr == nil {
				f.Close()
			}
			cerr := CheckTrusted(path(c.file), -1)
			for what, err := range map[string]error{"ReadTrusted": err, "OpenTrusted": oerr, "CheckTrusted": cerr} {
				if c.want == nil {
					if err != nil {
						t.Errorf("%s: %v", what, err)
					}
					continue
				}
				if !errors.Is(err, c.want) || !strings.Contains(err.Error(), path(c.refused)) {
					t.Errorf("%s: %v, want %v naming %s", what, err, c.want, path(c.refused))
				}
			}
			if c.want == nil && string(b) != "x = 1\n" {
				t.Errorf("read %q", b)
			}
			// The plain reads are not judged: the state files the
			// daemon's user owns go through them.
			if c.want == ErrNotTrusted {
				if _, err := ReadFile(path(c.file), 1<<20); err != nil {
					t.Errorf("ReadFile judged: %v", err)
				}
			}
		})
	}

	t.Run("include directory", func(t *testing.T) {
		if _, err := OpenDirTrusted(path("theirs")); !errors.Is(err, ErrNotTrusted) {
			t.Errorf("another user's directory: %v", err)
		}
		d, err := OpenDirTrusted(path("etc"))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if _, err := d.ReadFile("root0644", 1<<20); err != nil {
			t.Errorf("root's file: %v", err)
		}
		if _, err := d.ReadFile("nobody", 1<<20); !errors.Is(err, ErrNotTrusted) {
			t.Errorf("another user's file in root's directory: %v", err)
		}
	})

	t.Run("the daemon's user allowed", func(t *testing.T) {
		mkdir("daemon", 0o750, nuid)
		file("daemon/pass", 0o640, nuid, 0)
		if err := CheckTrusted(path("daemon/pass"), nuid); err != nil {
			t.Errorf("the daemon's own file, allowed: %v", err)
		}
		if err := CheckTrusted(path("daemon/pass"), -1); !errors.Is(err, ErrNotTrusted) {
			t.Errorf("the daemon's own file, not allowed: %v", err)
		}
		err := CheckTrusted(path("etc/nobody"), 1)
		if !errors.Is(err, ErrNotTrusted) || !strings.Contains(err.Error(), "must belong to root or ") {
			t.Errorf("another user's file: %v", err)
		}
		if err := CheckTrusted(path("daemon/missing"), nuid); err != nil {
			t.Errorf("a missing file is its reader's to report: %v", err)
		}
	})
}
