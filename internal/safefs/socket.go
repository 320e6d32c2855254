package safefs

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Owner is who a socket is given to: -1 keeps root's (or the binder's)
// user or group.
type Owner struct {
	UID, GID int
}

// afterBind, when set by a test, runs between bind and the check of
// what bind made: an attacker's step exactly in the window.
var afterBind func(path string)

// umaskMu serialises the umask changes of ListenUnix (the umask is the
// process's).
var umaskMu sync.Mutex

// ListenUnix binds a unix socket at path and gives it owner and mode.
// The directory is reached as OpenDir reaches it; a stale socket there
// (no server answers on it) is removed, anything else at path is an
// error. The socket is bound with no permission at all, then the inode
// is opened through the directory's descriptor without following a
// link and checked to be the socket just bound (a socket, owned by this
// process's user, mode 0, one link) before its owner and mode are set on
// that descriptor: a name swapped for a link or another file between the
// bind and the change is refused, never changed.
func ListenUnix(path string, owner Owner, mode fs.FileMode) (*net.UnixListener, error) {
	dir, name, err := splitOpen(path, guard{})
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	if err := dir.removeStale(name); err != nil {
		return nil, err
	}
	umaskMu.Lock()
	old := syscall.Umask(0o777)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	syscall.Umask(old)
	umaskMu.Unlock()
	if err != nil {
		return nil, err
	}
	l.SetUnlinkOnClose(true)
	if afterBind != nil {
		afterBind(path)
	}
	if err := dir.secureSocket(name, owner, mode); err != nil {
		// Not ours to remove any more if it was swapped: leave the name.
		l.SetUnlinkOnClose(false)
		l.Close()
		return nil, err
	}
	return l, nil
}

// secureSocket sets the owner and mode of the socket name that this
// process has just bound (see ListenUnix).
func (d *Dir) secureSocket(name string, owner Owner, mode fs.FileMode) error {
	fd, err := unix.Openat(d.Fd(), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: the socket just bound is gone: %w", d.Join(name), err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%s: %w", d.Join(name), err)
	}
	me := uint32(unix.Geteuid())
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || st.Uid != me || st.Mode&0o7777 != 0 || st.Nlink != 1 {
		return fmt.Errorf("%s was replaced between bind and chmod (now %s, owner uid %d, mode %04o, %d links): another user can change %s; refusing to touch it",
			d.Join(name), kind(st.Mode), st.Uid, st.Mode&0o7777, st.Nlink, d.path)
	}
	if owner.UID != -1 || owner.GID != -1 {
		if err := unix.Fchownat(fd, "", owner.UID, owner.GID, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown %s: %w", d.Join(name), err)
		}
	}
	if err := chmodFd(fd, uint32(mode.Perm())); err != nil {
		return fmt.Errorf("%s: %w", d.Join(name), err)
	}
	return nil
}

// removeStale removes a socket file left by a dead server at name; a
// socket a live server answers on, or anything that is not a socket, is
// an error.
func (d *Dir) removeStale(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	var st unix.Stat_t
	err := unix.Fstatat(d.Fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", d.Join(name), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("%s exists and is not a socket (it is %s)", d.Join(name), kind(st.Mode))
	}
	if c, err := net.DialTimeout("unix", d.Join(name), time.Second); err == nil {
		c.Close()
		return fmt.Errorf("%s is in use by a running server", d.Join(name))
	}
	return d.Remove(name)
}

// splitPath is path's directory and last component.
func splitPath(path string) (string, string) {
	return filepath.Dir(path), filepath.Base(path)
}

// SocketChange is a change AdjustSocket could not make: Setting is
// "owner", "group" or "mode".
type SocketChange struct {
	Setting string
	Err     error
}

// AdjustSocket gives the unix socket file at path, which this process
// did not just bind (an upgrade passed it: another process of sluice's
// bound it), the owner and mode it would have if bound now, where they
// differ; owner's -1 leaves that one as it is. The directory is reached
// as ListenUnix reaches it, the inode through its descriptor without
// following a link, and anything but a socket with one link is refused.
// The mode is changed first, then the group, then the owner (a process
// that gives the file away can no longer change it). A change the
// process may not make is returned with why, and the others are still
// made: a process without root may change the mode and the group (one it
// is a member of) of a socket it owns, and nothing else.
func AdjustSocket(path string, owner Owner, mode fs.FileMode) ([]SocketChange, error) {
	dir, name, err := splitOpen(path, guard{})
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	fd, err := unix.Openat(dir.Fd(), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || st.Nlink != 1 {
		return nil, fmt.Errorf("%s is %s with %d links, not the socket handed over; refusing to touch it", path, kind(st.Mode), st.Nlink)
	}
	var failed []SocketChange
	if want := uint32(mode.Perm()); st.Mode&0o7777 != want {
		if err := chmodFd(fd, want); err != nil {
			failed = append(failed, SocketChange{"mode", fmt.Errorf("%s: mode %04o, want %04o: %w", path, st.Mode&0o7777, want, err)})
		}
	}
	chown := func(setting string, uid, gid int, have uint32) {
		if err := unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			failed = append(failed, SocketChange{setting, fmt.Errorf("%s: %s %d, want %d: %w", path, setting, have, max(uid, gid), err)})
		}
	}
	if owner.GID != -1 && st.Gid != uint32(owner.GID) {
		chown("group", -1, owner.GID, st.Gid)
	}
	if owner.UID != -1 && st.Uid != uint32(owner.UID) {
		chown("owner", owner.UID, -1, st.Uid)
	}
	return failed, nil
}
