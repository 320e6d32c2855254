// Package safefs is how sluice touches the file system where another
// user could be waiting: it opens directories by walking the path one
// component at a time from "/" (following a symbolic link only where
// nobody but root, or sluice's own user, could have put it), and it
// works inside a directory through its descriptor: files are opened
// with O_NOFOLLOW and refused unless regular, a socket's owner and mode
// are set on the inode that bind made (checked by descriptor first),
// never on whatever the name points to a moment later.
//
// The rule it implements (docs/security.md, "Files and paths"): a
// process that may be root never follows a path component another user
// can change. Every root-phase file operation of sluice goes through
// this package; the daemon's own user uses it too for its state files,
// so that a symlink, a FIFO, a device or a 1 GiB file planted in the
// state directory is refused with one clear error instead of followed,
// waited on or read whole.
package safefs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxLinks bounds the symbolic links one walk follows, as the kernel's
// own limit (40) does.
const maxLinks = 40

// ErrUntrustedLink is wrapped by the error for a symbolic link that the
// walk will not follow: it, or the directory holding it, could have been
// put there by another user.
var ErrUntrustedLink = errors.New("symbolic link not followed")

// ErrNotRegular is wrapped by the error for a file that is not a regular
// file (a symbolic link, FIFO, device, socket or directory) where one is
// expected.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is wrapped by the error for a file larger than its reader
// allows.
var ErrTooLarge = errors.New("file too large")

// Dir is an open directory, reached without following anything another
// user could change. Work inside it goes through its descriptor.
type Dir struct {
	f       *os.File
	path    string
	created bool  // made by MkdirAll
	g       guard // what a file opened in it is judged by (OpenDirTrusted)
}

// Path is the path the directory was opened by (cleaned, absolute).
func (d *Dir) Path() string { return d.path }

// Fd is the directory's descriptor.
func (d *Dir) Fd() int { return int(d.f.Fd()) }

// Close closes the directory's descriptor.
func (d *Dir) Close() error { return d.f.Close() }

// OpenDir opens the existing directory at path.
func OpenDir(path string) (*Dir, error) {
	return walk(path, false, 0, guard{})
}

// MkdirAll opens the directory at path, creating what is missing: the
// directories above it with mode 0755, the last one with exactly mode
// (not filtered by the umask). created says whether the last one was
// made now; one that existed keeps its mode.
func MkdirAll(path string, mode fs.FileMode) (d *Dir, created bool, err error) {
	d, err = walk(path, true, mode, guard{})
	if err != nil {
		return nil, false, err
	}
	return d, d.created, nil
}

// trusted reports whether a symbolic link owned by linkUID in a
// directory with status dir can be followed by this process: both must
// belong to root or to this process's user, and the directory must not
// let anyone else change its entries (group- or world-writable only with
// the sticky bit, which keeps others from replacing an entry they do not
// own).
func trusted(dir *unix.Stat_t, linkUID uint32) bool {
	me := uint32(os.Geteuid())
	own := func(uid uint32) bool { return uid == 0 || uid == me }
	if !own(dir.Uid) || !own(linkUID) {
		return false
	}
	return dir.Mode&0o022 == 0 || dir.Mode&unix.S_ISVTX != 0
}

// walk opens path component by component. With create, missing
// directories are made (see MkdirAll). A symbolic link is followed only
// when trusted says so; the walk then starts again on the link's target.
// Each directory it passes through, "/" included, is judged by g (none
// unless g.on): the very inode the walk goes on from, through its
// descriptor.
func walk(path string, create bool, mode fs.FileMode, g guard) (*Dir, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for range maxLinks {
		d, next, err := walkOnce(filepath.Clean(abs), create, mode, g)
		if err != nil || next == "" {
			return d, err
		}
		abs = next
	}
	return nil, fmt.Errorf("%s: %w", path, unix.ELOOP)
}

// walkOnce walks abs; it returns the directory, or the path to walk
// instead when a trusted symbolic link stands in the way.
func walkOnce(abs string, create bool, mode fs.FileMode, g guard) (*Dir, string, error) {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, "", fmt.Errorf("open /: %w", err)
	}
	if err := g.judgeFd(fd, "/", true); err != nil {
		unix.Close(fd)
		return nil, "", err
	}
	comps := strings.Split(strings.TrimPrefix(abs, "/"), "/")
	if abs == "/" {
		comps = nil
	}
	done := "/"
	created := false
	for i, c := range comps {
		last := i == len(comps)-1
		nfd, made, err := openComponent(fd, c, create, last, mode)
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			next, lerr := followLink(fd, done, c, comps[i+1:])
			unix.Close(fd)
			if lerr != nil {
				return nil, "", fmt.Errorf("%s: %w", abs, lerr)
			}
			return nil, next, nil
		}
		unix.Close(fd)
		var pe *fs.PathError
		if errors.As(err, &pe) {
			pe.Path = filepath.Join(done, c) // "mkdir /path: permission denied"
			return nil, "", pe
		}
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", filepath.Join(done, c), err)
		}
		if err := g.judgeFd(nfd, filepath.Join(done, c), true); err != nil {
			unix.Close(nfd)
			return nil, "", err
		}
		fd, done, created = nfd, filepath.Join(done, c), made
	}
	// The last directory is reopened for reading (Readdir, Fsync); an
	// O_PATH descriptor cannot do either.
	rfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
		fd = rfd
	}
	return &Dir{f: os.NewFile(uintptr(fd), abs), path: abs, created: created, g: g}, "", nil
}

// openComponent opens the directory name under dirfd without following
// a symbolic link, creating it when asked (the last one with mode, the
// others 0755).
func openComponent(dirfd int, name string, create, last bool, mode fs.FileMode) (int, bool, error) {
	const flags = unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(dirfd, name, flags, 0)
	if err == nil || !create || !errors.Is(err, unix.ENOENT) {
		return fd, false, err
	}
	perm := uint32(0o755)
	if last {
		perm = uint32(mode.Perm())
	}
	if err := unix.Mkdirat(dirfd, name, perm); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, false, &fs.PathError{Op: "mkdir", Path: name, Err: err}
	}
	fd, err = unix.Openat(dirfd, name, flags, 0)
	if err != nil {
		return -1, false, err
	}
	if last {
		// The umask filtered mkdir's mode; set it exactly, on what was
		// opened (it is a directory: O_DIRECTORY).
		if err := chmodFd(fd, perm); err != nil {
			unix.Close(fd)
			return -1, false, err
		}
	}
	return fd, true, nil
}

// followLink returns the path to walk instead of the symbolic link name
// in the directory dirfd (reached as dirPath), followed by rest; an
// error if the link may not be followed or name is not a link at all.
func followLink(dirfd int, dirPath, name string, rest []string) (string, error) {
	var lst, dst unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &lst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return "", err
	}
	if lst.Mode&unix.S_IFMT != unix.S_IFLNK {
		return "", fmt.Errorf("%s is not a directory", filepath.Join(dirPath, name))
	}
	if err := unix.Fstat(dirfd, &dst); err != nil {
		return "", err
	}
	if !trusted(&dst, lst.Uid) {
		return "", fmt.Errorf("%w: %s is owned by uid %d in %s (owner uid %d, mode %04o), which another user can change; name the real directory instead",
			ErrUntrustedLink, filepath.Join(dirPath, name), lst.Uid, dirPath, dst.Uid, dst.Mode&0o7777)
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	target := string(buf[:n])
	if !filepath.IsAbs(target) {
		target = filepath.Join(dirPath, target)
	}
	return filepath.Join(append([]string{target}, rest...)...), nil
}

// chmodFd sets the mode of the inode fd refers to, even for an O_PATH
// descriptor (through /proc/self/fd, which names that inode and nothing
// else, as glibc's fchmodat does).
func chmodFd(fd int, mode uint32) error {
	if err := unix.Fchmod(fd, mode); err == nil {
		return nil
	}
	if err := unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", fd), mode); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	return nil
}

// Chown gives the directory itself to uid and gid (-1 keeps one).
func (d *Dir) Chown(uid, gid int) error {
	if err := unix.Fchown(d.Fd(), uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", d.path, err)
	}
	return nil
}

// checkName refuses a name that is not a single entry of the directory.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return fmt.Errorf("%q is not a file name", name)
	}
	return nil
}

// Join is the path of name inside the directory, for messages.
func (d *Dir) Join(name string) string { return filepath.Join(d.path, name) }

// Names lists the entries of the directory (not "." and ".."), unsorted;
// more than max is an error.
func (d *Dir) Names(max int) ([]string, error) {
	fd, err := unix.Openat(d.Fd(), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: d.path, Err: err}
	}
	f := os.NewFile(uintptr(fd), d.path)
	defer f.Close()
	names, err := f.Readdirnames(max + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if len(names) > max {
		return nil, fmt.Errorf("%s: more than %d entries", d.path, max)
	}
	return names, nil
}
