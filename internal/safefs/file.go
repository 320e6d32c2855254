package safefs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// kind names a file type for messages.
func kind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFSOCK:
		return "a socket"
	}
	return fmt.Sprintf("of type %#o", mode&unix.S_IFMT)
}

// beforeOpen, when set by a test, runs between OpenRegular's check of
// the name and its open: an attacker's swap exactly in that window.
var beforeOpen func(path string)

// OpenRegular opens the regular file name for reading. Anything else (a
// symbolic link, FIFO, device, socket, directory) is refused with an
// error wrapping ErrNotRegular before it is opened (so a FIFO cannot
// block and a device is never opened), and again on the descriptor (so
// that a swap between the check and the open is caught). A file larger
// than max bytes (max > 0) is refused with ErrTooLarge. A missing file
// wraps fs.ErrNotExist.
func (d *Dir) OpenRegular(name string, max int64) (*os.File, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(d.Fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, fmt.Errorf("%s: %w", d.Join(name), err)
	}
	if err := regular(d.Join(name), &st, max); err != nil {
		return nil, err
	}
	if beforeOpen != nil {
		beforeOpen(d.Join(name))
	}
	fd, err := unix.Openat(d.Fd(), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("%s: %w: it is a symbolic link", d.Join(name), ErrNotRegular)
		}
		return nil, fmt.Errorf("%s: %w", d.Join(name), err)
	}
	f := os.NewFile(uintptr(fd), d.Join(name))
	var fst unix.Stat_t
	if err := unix.Fstat(fd, &fst); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", d.Join(name), err)
	}
	if err := regular(d.Join(name), &fst, max); err != nil {
		f.Close()
		return nil, err
	}
	if d.g.on {
		if err := judge(d.Join(name), &fst, d.g.also, false); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// regular refuses st unless it is a regular file of at most max bytes.
func regular(path string, st *unix.Stat_t, max int64) error {
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s: %w: it is %s", path, ErrNotRegular, kind(st.Mode))
	}
	if max > 0 && st.Size > max {
		return fmt.Errorf("%s: %w: %d bytes, at most %d are read", path, ErrTooLarge, st.Size, max)
	}
	return nil
}

// ReadFile reads the whole regular file name, refused as OpenRegular
// refuses it; it never reads more than max bytes (max > 0), even from a
// file that grows while it reads.
func (d *Dir) ReadFile(name string, max int64) ([]byte, error) {
	f, err := d.OpenRegular(name, max)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := io.Reader(f)
	if max > 0 {
		r = io.LimitReader(f, max+1)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.Join(name), err)
	}
	if max > 0 && int64(len(b)) > max {
		return nil, fmt.Errorf("%s: %w: it grew past %d bytes while read", d.Join(name), ErrTooLarge, max)
	}
	return b, nil
}

// ReadFile reads the regular file at path as Dir.ReadFile does, reached
// as Open reaches it.
func ReadFile(path string, max int64) ([]byte, error) {
	dir, name, err := openFinal(path, guard{})
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return dir.ReadFile(name, max)
}

// Open opens the regular file at path for reading, refused as
// Dir.OpenRegular refuses it. Its directory is reached as OpenDir
// reaches it, and a symbolic link in the last component is followed
// only where OpenDir would follow it (an administrator's link from
// /etc/sluice to the real file, not one another user could plant).
func Open(path string, max int64) (*os.File, error) {
	dir, name, err := openFinal(path, guard{})
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return dir.OpenRegular(name, max)
}

// OpenState opens the regular file at path for reading, as Open does,
// except that the last component is never followed, even a link root
// made: for the files sluice writes itself (its state), which are never
// links, whatever a compromised daemon user leaves in their place.
func OpenState(path string, max int64) (*os.File, error) {
	dir, name, err := splitOpen(path, guard{})
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return dir.OpenRegular(name, max)
}

// openFinal opens the directory of path and returns it with the name of
// the file in it, after following trusted symbolic links in the last
// component; every directory on the way is judged by g.
func openFinal(path string, g guard) (*Dir, string, error) {
	for range maxLinks {
		dir, name, err := splitOpen(path, g)
		if err != nil {
			return nil, "", err
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dir.Fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
			return dir, name, nil // the open reports a missing file
		}
		next, err := followLink(dir.Fd(), dir.Path(), name, nil)
		dir.Close()
		if err != nil {
			return nil, "", err
		}
		path = next
	}
	return nil, "", fmt.Errorf("%s: %w", path, unix.ELOOP)
}

// splitOpen opens the directory of path and returns it with the last
// component's name; the directories on the way are judged by g.
func splitOpen(path string, g guard) (*Dir, string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	dirPath, name := splitPath(abs)
	dir, err := walk(dirPath, false, 0, g)
	if err != nil {
		return nil, "", err
	}
	return dir, name, nil
}

// Remove removes the entry name (a file, link or socket; never what a
// link points to). A missing entry is not an error.
func (d *Dir) Remove(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := unix.Unlinkat(d.Fd(), name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", d.Join(name), err)
	}
	return nil
}

// ErrNotHandedOver is HandOver's refusal: a file that is neither the
// daemon's user's nor one an earlier run left as root.
var ErrNotHandedOver = errors.New("not a file sluice left as root")

// HandOver gives the regular file name to uid and gid when root owns
// it and nothing else names it (one link): a file an earlier run left as
// root, which the daemon's user must now read. It reports whether the
// file was handed over; a missing file, or an entry uid owns already
// (whatever it is: the daemon's reader judges it), is nothing to do. Any
// other entry is refused with ErrNotHandedOver, saying what it is: a
// link or a file with other names owned by root (handing it over would
// give another file away), or an entry of another user.
func (d *Dir) HandOver(name string, uid, gid int) (bool, error) {
	if err := checkName(name); err != nil {
		return false, err
	}
	fd, err := unix.Openat(d.Fd(), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s: %w", d.Join(name), err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, fmt.Errorf("%s: %w", d.Join(name), err)
	}
	switch {
	case int(st.Uid) == uid:
		return false, nil
	case st.Uid != 0:
		return false, fmt.Errorf("%s: %w: it is %s of %s", d.Join(name), ErrNotHandedOver, kind(st.Mode), owner(int(st.Uid)))
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return false, fmt.Errorf("%s: %w: it is %s of root", d.Join(name), ErrNotHandedOver, kind(st.Mode))
	case st.Nlink != 1:
		return false, fmt.Errorf("%s: %w: root's file with %d names (hard links)", d.Join(name), ErrNotHandedOver, st.Nlink)
	}
	if err := unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH); err != nil {
		return false, fmt.Errorf("chown %s: %w", d.Join(name), err)
	}
	return true, nil
}
