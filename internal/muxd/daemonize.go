package muxd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"sluice/internal/privdrop"
	"sluice/internal/syslog"
)

// childEnv marks the detached daemon started by daemonize: fd 3 is the
// report pipe and, with -p, fd 4 the pid file opened by the parent.
const childEnv = "SLUICE_MUX_DAEMON"

// daemonize is docs/protocols/mimedefang-multiplexor.md, "Startup" step 9, in Go's terms: start this program again,
// detached, with the pid file and a report pipe, and exit 0 when it says
// "X" (serving), or print "Error from child: <msg>" and exit 1.
func (d *daemon) daemonize(exe string) int {
	defer d.cleanup()
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Fprintf(d.stderr, "%s: %v\n", d.o.Prog, err)
		return 1
	}
	defer r.Close()
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		w.Close()
		fmt.Fprintf(d.stderr, "%s: %v\n", d.o.Prog, err)
		return 1
	}
	defer devnull.Close()
	cmd := &exec.Cmd{
		Path:        exe,
		Args:        os.Args,
		Env:         append(os.Environ(), childEnv+"=1"),
		Stdin:       devnull,
		Stdout:      devnull,
		Stderr:      d.daemonStderr(devnull),
		ExtraFiles:  []*os.File{w},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	if d.pid != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, d.pid)
	}
	err = cmd.Start()
	w.Close()
	if err != nil {
		fmt.Fprintf(d.stderr, "%s: starting the daemon: %v\n", d.o.Prog, err)
		return 1
	}
	msg, _ := io.ReadAll(r)
	if string(msg) == "X" {
		_ = cmd.Process.Release()
		return 0
	}
	_ = cmd.Wait()
	text := strings.TrimPrefix(string(msg), "E")
	if text == "" {
		text = "exited before it was ready"
	}
	fmt.Fprintf(d.stderr, "Error from child: %s\n", text)
	return 1
}

// daemonStderr is the detached daemon's stderr: /dev/null while the
// syslog socket takes messages (the daemon logs there); without one (no
// /dev/log, as in a container or a chroot) the daemon's log falls back to
// stderr, so it keeps this process's, unless that is a pipe, whose reader
// would wait for the daemon's end (a shell's $(...)): then the daemon's
// log is discarded, and this says so and why.
func (d *daemon) daemonStderr(devnull *os.File) *os.File {
	err := syslog.Reachable(d.o.SyslogSocket)
	if err == nil {
		return devnull
	}
	f, ok := d.stderr.(*os.File)
	if ok {
		if st, serr := f.Stat(); serr == nil && st.Mode()&os.ModeNamedPipe == 0 {
			return f
		}
	}
	fmt.Fprintf(d.stderr, "%s: cannot reach syslog (%v), and stderr is not a file, a terminal or a socket: the daemon's log is discarded (give it a syslog socket, or stderr on a file, or run it with -D)\n", d.o.Prog, err)
	return devnull
}

// droppedEnv marks the process that root's -U drop executed (dropByExec):
// it runs as the -U user already, and its value is the descriptor of the
// pid file root opened, or "-" without -p.
const droppedEnv = "SLUICE_MUX_DROPPED"

// dropPrivileges switches to the -U user name (nothing to do when the
// process already runs as that user and group). Root does it by
// executing this program again (dropByExec), so that every thread of the
// multiplexor, and every worker, starts with an empty capability bounding
// set; another user, or a process that root's drop or the multiplexor
// itself started, is switched in place (initgroups, setgid, setuid), which
// fails as the reference's does. It returns an error text in the
// reference's words; on success by exec it does not return.
func (d *daemon) dropPrivileges(name string, started bool) string {
	a, err := privdrop.Lookup(name)
	if err != nil {
		return fmt.Sprintf("Unknown user '%s'", name)
	}
	if a.Current() {
		return ""
	}
	var se *privdrop.StepError
	if os.Geteuid() == 0 && a.UID != 0 && !started {
		err = d.dropByExec(a)
	} else {
		err = a.Drop()
	}
	if errors.As(err, &se) {
		return fmt.Sprintf("%s: %s", se.Step, errnoText(se.Err))
	} else if err != nil {
		return err.Error()
	}
	return ""
}

// dropByExec executes this program again, with the same arguments, as a
// (privdrop.ExecAllowSetID: the bounding set emptied on the one thread
// that executes, so the new image's every thread is born without it; no
// no_new_privs, for the workers' set-group-ID postdrop), passing the pid
// file root opened (droppedEnv). It returns only on failure, and the
// caller must then exit.
func (d *daemon) dropByExec(a privdrop.Account) error {
	exe, err := privdrop.OpenSelf()
	if err != nil {
		return err
	}
	defer exe.Close()
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, droppedEnv+"=") })
	var keep []*os.File
	if d.pid != nil {
		keep = append(keep, d.pid)
		env = append(env, droppedEnv+"="+strconv.Itoa(int(d.pid.Fd())))
	} else {
		env = append(env, droppedEnv+"=-")
	}
	return privdrop.ExecAllowSetID(a, exe, os.Args, env, keep)
}

// takeDropped reports whether root's -U drop executed this process
// (droppedEnv), and takes the pid file it passed. The variable is unset:
// the workers inherit the environment.
func (d *daemon) takeDropped() bool {
	v, ok := os.LookupEnv(droppedEnv)
	if !ok {
		return false
	}
	os.Unsetenv(droppedEnv)
	if fd, err := strconv.Atoi(v); err == nil && fd > 2 && d.o.PidFile != "" {
		syscall.CloseOnExec(fd)
		d.pid = os.NewFile(uintptr(fd), d.o.PidFile)
	}
	return true
}

// errnoText is strerror's text: the errno message with a capital.
func errnoText(err error) string {
	var en syscall.Errno
	if errors.As(err, &en) {
		s := en.Error()
		if s != "" {
			return strings.ToUpper(s[:1]) + s[1:]
		}
	}
	return err.Error()
}
