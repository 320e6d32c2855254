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
