package muxd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"sluice/internal/handover"
)

// daemon is one run's state.
type daemon struct {
	o      *Options
	stderr io.Writer
	report *os.File // the daemonize pipe (detached child only)
	pid    *os.File // kept open for an upgrade to hand over
	lock   *os.File
	// up is the conversation with the multiplexor this one takes over
	// from (an upgrade in place), passed what it handed over by name;
	// keepFiles is set while the pid and lock files and the sockets'
	// paths are (or have become) another process's: nothing removes them.
	up        *handover.Child
	passed    map[string]*os.File
	keepFiles bool
}

// Run is the reference's startup (docs/protocols/mimedefang-multiplexor.md,
// "Startup", from step 1), serving and shutdown. Errors go to stderr
// prefixed with o.Prog, in the reference's words; the result is the exit
// status. It returns when SIGTERM arrives or ctx ends.
func Run(ctx context.Context, o Options, stderr io.Writer) int {
	d := &daemon{o: &o, stderr: stderr}
	syscall.Umask(0o077)
	if os.Getuid() != os.Geteuid() || os.Getgid() != os.Getegid() {
		fmt.Fprintf(stderr, "%s: refusing to run setuid or setgid\n", o.Prog)
		return 1
	}
	if msg := d.upgradeChild(); msg != "" {
		fmt.Fprintf(stderr, "%s: %s\n", o.Prog, msg)
		return 1
	}
	child := os.Getenv(childEnv) != ""
	dropped := d.takeDropped()
	if child {
		d.inherit()
	} else if d.up == nil && !dropped && o.PidFile != "" && !d.openPidFile() {
		// Opened before the privilege drop, as the reference does, but
		// never through a symbolic link (openOwnFile).
		return 1
	}
	exe, exeErr := os.Executable()
	if msg := d.becomeUser(child || dropped || d.up != nil); msg != "" {
		fmt.Fprintln(stderr, msg)
		d.cleanup()
		return 1
	}
	if !child {
		if err := os.Chdir(o.Spool); err != nil {
			fmt.Fprintf(stderr, "%s: Unable to chdir(%s): %s\n", o.Prog, o.Spool, errnoText(err))
			d.cleanup()
			return 1
		}
		if !o.Foreground && d.up == nil { // an upgrade's process is in the background already, or stays in the foreground
			if exeErr != nil {
				fmt.Fprintf(stderr, "%s: cannot find my own executable to daemonize (use -D): %v\n", o.Prog, exeErr)
				d.cleanup()
				return 1
			}
			return d.daemonize(exe)
		}
	}
	syscall.Umask(d.fileMask())
	if msg := d.takeFiles(); msg != "" {
		return d.fail(msg)
	}
	listeners, msg := d.bind()
	if msg != "" {
		d.removeFiles()
		return d.fail(msg)
	}
	return d.serve(ctx, listeners)
}

// inherit takes the report pipe and the pid file the parent passed to
// the detached child.
func (d *daemon) inherit() {
	os.Unsetenv(childEnv) // the workers inherit the environment
	syscall.CloseOnExec(3)
	d.report = os.NewFile(3, "report pipe")
	if d.o.PidFile != "" {
		syscall.CloseOnExec(4)
		d.pid = os.NewFile(4, d.o.PidFile)
	}
}

// becomeUser drops to -U and refuses to go on as root; it returns the
// error line to print, or "". started says the process was started by a
// multiplexor (detached, dropped or upgraded), which ran as the user.
func (d *daemon) becomeUser(started bool) string {
	if d.o.User != "" {
		if msg := d.dropPrivileges(d.o.User, started); msg != "" {
			return d.o.Prog + ": " + msg
		}
	}
	if os.Getuid() == 0 || os.Geteuid() == 0 {
		return "ERROR: You must not run mimedefang-multiplexor as root.\nUse the -U option to set a non-root user."
	}
	return ""
}

// sockMask is the umask the main, -N and -O sockets are created under
// (-G: group-writable).
func (d *daemon) sockMask() int {
	if d.o.Group {
		return 0o007
	}
	return 0o077
}

// fileMask is the umask files are created under (-G: group-readable).
func (d *daemon) fileMask() int {
	if d.o.Group {
		return 0o027
	}
	return 0o077
}

// takeFiles locks the lock file and writes the pid file; it returns the
// reference's error text, or "". The lock file is opened as the -U user,
// by openOwnFile's rule, as the pid file was.
func (d *daemon) takeFiles() string {
	if d.o.LockFile != "" {
		f, err := d.passedOr("lock", func() (*os.File, error) { return openOwnFile(d.o.LockFile, pidFileOwner(d.o)) })
		var rf *refusedFile
		if errors.As(err, &rf) {
			// The reference would say "Cannot lock lockfile" for any
			// failure to open it; a refusal says what was there.
			msg := fmt.Sprintf("Could not open lock file %s: %s", d.o.LockFile, rf.reason)
			d.syslogError(msg)
			return msg
		}
		if err == nil {
			d.lock = f
			err = lockFile(f)
		}
		if err != nil {
			return "Cannot lock lockfile: Is another copy running?"
		}
	}
	if d.pid != nil && d.up == nil { // an upgrade's process names itself once the old one has stopped
		writePid(d.pid)
	}
	return ""
}

// ready tells the waiting parent, if any, that the daemon is serving.
func (d *daemon) ready() {
	if d.report != nil {
		_, _ = d.report.WriteString("X")
		d.report.Close()
		d.report = nil
	}
}

// fail reports a startup error: to the waiting parent when detached, else
// on stderr. It returns the exit status.
func (d *daemon) fail(msg string) int {
	if d.report != nil {
		_, _ = d.report.WriteString("E" + msg)
		d.report.Close()
		d.report = nil
	} else {
		fmt.Fprintln(d.stderr, msg)
	}
	d.cleanup()
	return 1
}

func (d *daemon) cleanup() {
	if d.pid != nil {
		d.pid.Close()
	}
	if d.lock != nil {
		d.lock.Close()
	}
}

// removeFiles unlinks the pid file and the lock file.
func (d *daemon) removeFiles() {
	if d.keepFiles {
		return
	}
	if d.o.PidFile != "" {
		_ = os.Remove(d.o.PidFile)
	}
	if d.o.LockFile != "" {
		_ = os.Remove(d.o.LockFile)
	}
}

func (d *daemon) removeAll(listeners []listener) {
	if d.keepFiles {
		return
	}
	d.removeFiles()
	for _, l := range listeners {
		if l.unlink != "" {
			_ = os.Remove(l.unlink)
		}
	}
}
