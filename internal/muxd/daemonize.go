package muxd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"sluice/internal/privdrop"
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
		Stderr:      devnull,
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

// dropPrivileges is initgroups, setgid, setuid to name (skipped when the
// process already runs as that user and group). It returns an error text
// in the reference's words.
func dropPrivileges(name string) string {
	a, err := privdrop.Lookup(name)
	if err != nil {
		return fmt.Sprintf("Unknown user '%s'", name)
	}
	var se *privdrop.StepError
	if err := a.Drop(); errors.As(err, &se) {
		return fmt.Sprintf("%s: %s", se.Step, errnoText(se.Err))
	} else if err != nil {
		return err.Error()
	}
	return ""
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
