package muxd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"sluice/internal/privdrop"
	"sluice/internal/safefs"
	"sluice/internal/syslog"
)

// refusedFile is why a pid or lock file was refused: what was at its path
// is not a file the daemon may write through (docs/mux.md, "The pid and
// lock files"). Its text is the reason alone; the caller names the file.
type refusedFile struct {
	reason string
	err    error // the system's error, if one said it
}

func (e *refusedFile) Error() string { return e.reason }
func (e *refusedFile) Unwrap() error { return e.err }

// fileOwner is the one user besides root that may own the pid and lock
// files: the -U user, or the starting user without -U.
type fileOwner struct {
	uid  int
	name string
}

// pidFileOwner is the fileOwner for the files of o: the -U user, looked
// up before the privilege drop (an unknown name leaves root alone; the
// drop then reports it), or the current user.
func pidFileOwner(o *Options) fileOwner {
	if o.User != "" {
		if a, err := privdrop.Lookup(o.User); err == nil {
			return fileOwner{uid: a.UID, name: o.User}
		}
		return fileOwner{uid: 0, name: o.User}
	}
	uid := os.Geteuid()
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return fileOwner{uid: uid, name: u.Username}
	}
	return fileOwner{uid: uid, name: "uid " + strconv.Itoa(uid)}
}

// openOwnFile opens path, the pid or lock file, for reading and writing,
// creating it (mode 0666 under the umask) if it is missing. Its directory
// is reached as safefs.OpenDir reaches one (a symbolic link on the way is
// followed only if nobody but root or this process's user could have put
// it there); in it, the file is opened without following a symbolic link
// (O_NOFOLLOW) or waiting on a FIFO (O_NONBLOCK), and then, on the
// descriptor, openOwnFile refuses anything but a regular file with exactly
// one link owned by root or by owner: a link, FIFO, device or directory,
// or a hard link to a file elsewhere, would make root (the pid file is
// opened before the privilege drop) truncate, chmod and write a file that
// another user chose. A refusal is a *refusedFile; any other failure is
// the system's error.
func openOwnFile(path string, owner fileOwner) (*os.File, error) {
	path = filepath.Clean(path)
	dir, err := safefs.OpenDir(filepath.Dir(path))
	if errors.Is(err, safefs.ErrUntrustedLink) {
		return nil, &refusedFile{reason: err.Error(), err: err}
	} else if err != nil {
		return nil, err
	}
	defer dir.Close()
	fd, err := syscall.Openat(dir.Fd(), filepath.Base(path), syscall.O_RDWR|syscall.O_CREAT|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0o666)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return nil, &refusedFile{reason: "it is a symbolic link, which sluice never follows", err: err}
	case errors.Is(err, syscall.EISDIR):
		return nil, &refusedFile{reason: "it is a directory, not a regular file", err: err}
	case err != nil:
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	if err := checkOwnFile(&st, owner); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	if err := syscall.SetNonblock(fd, false); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// checkOwnFile is openOwnFile's rule on what the descriptor reached.
func checkOwnFile(st *syscall.Stat_t, owner fileOwner) error {
	if kind := uint32(st.Mode) & syscall.S_IFMT; kind != syscall.S_IFREG {
		return &refusedFile{reason: fmt.Sprintf("it is %s, not a regular file", fileKind(kind))}
	}
	if n := uint64(st.Nlink); n != 1 {
		return &refusedFile{reason: fmt.Sprintf("it has %d hard links; sluice writes only a file with one", n)}
	}
	if uid := int(st.Uid); uid != 0 && uid != owner.uid {
		return &refusedFile{reason: fmt.Sprintf("it is owned by uid %d, neither root nor %s", uid, owner.name)}
	}
	return nil
}

// fileKind names a file type (the S_IFMT bits of a mode) for a message.
func fileKind(kind uint32) string {
	switch kind {
	case syscall.S_IFLNK:
		return "a symbolic link"
	case syscall.S_IFIFO:
		return "a FIFO"
	case syscall.S_IFCHR:
		return "a character device"
	case syscall.S_IFBLK:
		return "a block device"
	case syscall.S_IFDIR:
		return "a directory"
	case syscall.S_IFSOCK:
		return "a socket"
	}
	return fmt.Sprintf("of type %#o", kind)
}

// openPidFile opens -p before the privilege drop, as the reference does,
// and makes it world-readable. A file it cannot open, or refuses, is
// reported as the reference reports a pid file it cannot open ("Could
// not open PID file <path>: <why>", to syslog, and here to stderr too);
// it returns false then, and the daemon exits 1 before it binds anything.
func (d *daemon) openPidFile() bool {
	f, err := openOwnFile(d.o.PidFile, pidFileOwner(d.o))
	if err != nil {
		msg := fmt.Sprintf("Could not open PID file %s: %s", d.o.PidFile, fileErrText(err))
		fmt.Fprintf(d.stderr, "%s: %s\n", d.o.Prog, msg)
		d.syslogError(msg)
		return false
	}
	if err := f.Chmod(0o644); err != nil { // it needs to be world-readable
		f.Close()
		msg := fmt.Sprintf("Could not open PID file %s: fchmod: %s", d.o.PidFile, errnoText(err))
		fmt.Fprintf(d.stderr, "%s: %s\n", d.o.Prog, msg)
		d.syslogError(msg)
		return false
	}
	d.pid = f
	return true
}

// fileErrText is the reason part of a pid or lock file error: the
// refusal's words, or strerror's.
func fileErrText(err error) string {
	var rf *refusedFile
	if errors.As(err, &rf) {
		return rf.reason
	}
	return errnoText(err)
}

// syslogError sends msg to syslog at severity err with the -Y ident and
// -S facility, for the errors the reference logs there before the daemon's
// own log is open (serve opens it). With no syslog socket it does nothing:
// the caller has printed msg already.
func (d *daemon) syslogError(msg string) {
	facility, _ := syslog.FacilityCode(d.o.Facility)
	s := syslog.Open(syslog.Options{Path: d.o.SyslogSocket, Tag: d.o.Label, Facility: facility, Fallback: io.Discard})
	if !s.Fallback() {
		s.Log(3, msg) // LOG_ERR
	}
	_ = s.Close()
}
