package cli

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"sluice/internal/safefs"
)

// pidFileDir opens the directory of serve's -pidfile path: reached
// without following a link another user could have planted (safefs), and,
// for a process running as root, judged as the files that steer root are
// (it and every directory above it root's and writable by nobody else,
// or sticky): root, and the init script that reads the file as root,
// must not take a pid from a file another user can replace.
func pidFileDir(path string) (*safefs.Dir, error) {
	if os.Geteuid() == 0 {
		return safefs.OpenDirTrusted(filepath.Dir(path))
	}
	return safefs.OpenDir(filepath.Dir(path))
}

// writePidFile writes this process's pid, a line, to path, once the
// daemon serves: into a new file made in the directory (O_EXCL,
// O_NOFOLLOW: nothing already there is followed or written through), then
// renamed over path, so that a reader sees the old pid or the new one,
// never a part; the rename replaces a link at path, never what it points
// to. The file is mode 0644, owned by the process's user: after the
// start as root with a user, the directory must be one that user may
// write in (the runtime directory, /run/sluice, is).
func writePidFile(path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("pid file %s: the path must be absolute", path)
	}
	dir, err := pidFileDir(path)
	if err != nil {
		return fmt.Errorf("pid file %s: %w", path, err)
	}
	defer dir.Close()
	name := filepath.Base(path)
	tmp := "." + name + ".new"
	if err := dir.Remove(tmp); err != nil { // a crash's leftover
		return fmt.Errorf("pid file %s: %w", path, err)
	}
	fd, err := unix.Openat(dir.Fd(), tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("pid file %s: as %s, cannot create a file in %s: %w (start as root, name a file in the runtime directory, such as /run/sluice/sluice.pid)", path, whoami(), dir.Path(), err)
	}
	f := os.NewFile(uintptr(fd), dir.Join(tmp))
	_, err = fmt.Fprintf(f, "%d\n", os.Getpid())
	if err == nil {
		err = f.Chmod(0o644) // readable by anyone, whatever the umask
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dir.Fd(), tmp, dir.Fd(), name)
	}
	if err != nil {
		_ = dir.Remove(tmp)
		return fmt.Errorf("pid file %s: %w", path, err)
	}
	return nil
}

// removePidFile removes path when it still names this process: after an
// upgrade the file names the new daemon, which the old one leaves alone.
// What it cannot read or remove it reports; a missing file is no error.
func removePidFile(path string) error {
	dir, err := pidFileDir(path)
	if err != nil {
		return fmt.Errorf("pid file %s: %w", path, err)
	}
	defer dir.Close()
	name := filepath.Base(path)
	b, err := dir.ReadFile(name, 64)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pid file %s: %w", path, err)
	}
	if strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		return nil
	}
	return dir.Remove(name)
}

// whoami names the process's user for a message.
func whoami() string {
	uid := os.Geteuid()
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return "user " + u.Username
	}
	return "uid " + strconv.Itoa(uid)
}
