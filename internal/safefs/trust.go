package safefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"strconv"

	"golang.org/x/sys/unix"
)

// ErrNotTrusted is matched (errors.Is) by the error for a file root would
// be steered by, or a directory on its path, that a user other than root
// owns or could write: an *UntrustedError.
var ErrNotTrusted = errors.New("not trusted by root")

// UntrustedError is the refusal of a file, or of a directory on its path,
// that root must not be steered by, with what was found: who owns it and
// its mode. It matches ErrNotTrusted.
type UntrustedError struct {
	Path string
	UID  int
	Mode uint32 // the permission bits, sticky and set-ID bits included
	Dir  bool   // a directory on the path, not the file itself
	Also string // the user besides root who may own it ("" for none)
}

// Error says what was found and the rule, as OpenSSH's StrictModes and
// Postfix's "postfix check" say it.
func (e *UntrustedError) Error() string {
	who := "root"
	if e.Also != "" {
		who = "root or " + e.Also
	}
	what := "a file root reads"
	if e.Also != "" {
		what = "a file sluice reads as " + e.Also
	}
	if e.Dir {
		return fmt.Sprintf("%s: owned by %s, mode %04o: a directory on the path of %s must belong to %s and not be writable by group or others (unless sticky)",
			e.Path, owner(e.UID), e.Mode, what, who)
	}
	return fmt.Sprintf("%s: owned by %s, mode %04o: %s must belong to %s and not be writable by group or others",
		e.Path, owner(e.UID), e.Mode, what, who)
}

// Is makes errors.Is(err, ErrNotTrusted) hold.
func (e *UntrustedError) Is(target error) bool { return target == ErrNotTrusted }

// owner names a uid for a message: "nobody (uid 65534)".
func owner(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return fmt.Sprintf("%s (uid %d)", u.Username, uid)
	}
	return fmt.Sprintf("uid %d", uid)
}

// judge is the one place that decides whether root may be steered by
// what is at path, whose status is st: a regular file (dir false), or a
// directory on its path (dir true). Both must belong to root, or to the
// user also (>= 0; -1 for none: the files only sluice's own user reads
// after root gave up its privileges), and must not be writable by group
// or others; a directory may be with the sticky bit, which keeps others
// from replacing an entry they do not own (/tmp). A file that is not a
// regular one (a FIFO, a device, a symbolic link) is refused as such.
func judge(path string, st *unix.Stat_t, also int, dir bool) error {
	want := uint32(unix.S_IFREG)
	if dir {
		want = unix.S_IFDIR
	}
	if st.Mode&unix.S_IFMT != want {
		if dir {
			return fmt.Errorf("%s: it is %s, not a directory", path, kind(st.Mode))
		}
		return fmt.Errorf("%s: %w: it is %s", path, ErrNotRegular, kind(st.Mode))
	}
	ownerOK := st.Uid == 0 || (also >= 0 && st.Uid == uint32(also))
	writable := st.Mode&0o022 != 0
	if dir && st.Mode&unix.S_ISVTX != 0 {
		writable = false
	}
	if ownerOK && !writable {
		return nil
	}
	e := &UntrustedError{Path: path, UID: int(st.Uid), Mode: st.Mode & 0o7777, Dir: dir}
	if also > 0 {
		e.Also = "uid " + strconv.Itoa(also)
		if u, err := user.LookupId(strconv.Itoa(also)); err == nil {
			e.Also = u.Username
		}
	}
	return e
}

// guard is what a walk and an open judge: nothing (on false), or every
// directory passed and the file opened, by judge with also.
type guard struct {
	on   bool
	also int
}

// asRoot is the guard of a process that may be steered: judging when it
// runs as root (a user runs their own files, and nobody else's can steer
// more than that user).
func asRoot(also int) guard { return guard{on: os.Geteuid() == 0, also: also} }

// judgeFd judges the inode fd refers to (a directory on a path).
func (g guard) judgeFd(fd int, path string, dir bool) error {
	if !g.on {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return judge(path, &st, g.also, dir)
}

// ReadTrusted reads the file at path as ReadFile does and, when this
// process is root, refuses it unless it and every directory on its path
// (each link followed included) belong to root and are not writable by
// group or others (an *UntrustedError naming the path, its owner and its
// mode): for the files that steer sluice (its configuration, the tables
// and files the configuration names), which root must not take from
// another user. The file judged is the one read: its descriptor's.
func ReadTrusted(path string, max int64) ([]byte, error) {
	dir, name, err := openFinal(path, asRoot(-1))
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return dir.ReadFile(name, max)
}

// OpenTrusted opens the file at path as Open does, judged as
// ReadTrusted judges it.
func OpenTrusted(path string, max int64) (*os.File, error) {
	dir, name, err := openFinal(path, asRoot(-1))
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return dir.OpenRegular(name, max)
}

// OpenDirTrusted opens the directory at path as OpenDir does and, when
// this process is root, judges it and every directory on its path as
// ReadTrusted does; the files read through it (Dir.ReadFile,
// Dir.OpenRegular) are judged too.
func OpenDirTrusted(path string) (*Dir, error) {
	return walk(path, false, 0, asRoot(-1))
}

// CheckTrusted judges the file at path, without reading it, as
// ReadTrusted would, except that it and the directories on its path may
// also belong to the user also (-1 for none): for a file that only
// sluice's own user reads, once root gave its privileges up (a Redis
// password file), judged by the root start that hands that user its
// configuration. Nothing is judged when this process is not root. A
// file, or a directory on its path, that does not exist is not an error
// here: its reader reports it.
func CheckTrusted(path string, also int) error {
	g := asRoot(also)
	if !g.on {
		return nil
	}
	dir, name, err := openFinal(path, g)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer dir.Close()
	var st unix.Stat_t
	if err := unix.Fstatat(dir.Fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		return nil
	} else if err != nil {
		return fmt.Errorf("%s: %w", dir.Join(name), err)
	}
	return judge(dir.Join(name), &st, also, false)
}
