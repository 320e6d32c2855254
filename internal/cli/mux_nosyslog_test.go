package cli

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"sluice/internal/testutil/logbuf"
	"sluice/internal/testutil/wait"
)

// TestMuxWithoutSyslogLogsToStderr: with no syslog socket (a container, a
// chroot) the multiplexor's log, here the startup error of -d's event log
// (in /var/log, which the -U user cannot write), reaches stderr after one
// notice: in the foreground (-D); detached with stderr on a file, which
// the daemon keeps; detached with stderr on a pipe, which the daemon
// does not keep (its reader would wait for the daemon's end), and then
// the starting process says the log is discarded.
func TestMuxWithoutSyslogLogsToStderr(t *testing.T) {
	bin, worker := muxBinaries(t)
	uarg, u := asUser(t)
	spool := spoolDir(t, u)
	noSyslog := filepath.Join(spool, "no-syslog")
	env := append(os.Environ(), muxSyslogEnv+"="+noSyslog)
	args := func(name string, more ...string) []string {
		a := []string{"mux", "-z", spool, "-s", filepath.Join(spool, name+".sock"), "-f", worker, "-m", "1", "-x", "1", "-d"}
		return append(append(a, more...), uarg...)
	}
	notice := "cannot reach syslog at " + noSyslog + " ("
	const reason = "Could not open event debug log /var/log/mdefang-event-debug.log: "
	logged := func(s string) bool { return strings.Contains(s, notice) && strings.Contains(s, reason) }

	// Foreground.
	var fg logbuf.Buffer
	fgCmd := exec.Command(bin, args("fg", "-D")...)
	fgCmd.Env, fgCmd.Stderr = env, &fg
	if err := fgCmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- fgCmd.Wait() }()
	t.Cleanup(func() { _ = fgCmd.Process.Kill(); <-done })
	wait.For(t, func() bool { return logged(fg.String()) }, "-D: the notice and the reason on stderr; it has %q", &fg)
	if n := strings.Count(fg.String(), "syslog at"); n != 1 {
		t.Errorf("-D: %d lines about syslog, want the one notice:\n%s", n, fg.String())
	}

	// Detached, stderr on a file: the daemon keeps it.
	out := filepath.Join(t.TempDir(), "stderr")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pidFile := filepath.Join(spool, "file.pid")
	cmd := exec.Command(bin, args("file", "-p", pidFile)...)
	cmd.Env, cmd.Stderr = env, f
	if err := cmd.Run(); err != nil {
		t.Fatalf("detached: %v", err)
	}
	b, err := os.ReadFile(pidFile)
	pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || perr != nil {
		t.Fatalf("pid file %q: %v %v", b, err, perr)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	read := func() string { b, _ := os.ReadFile(out); return string(b) }
	wait.For(t, func() bool { return logged(read()) }, "detached: the notice and the reason in the file the daemon kept as stderr")
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "the daemon", pid)

	// Detached, stderr on a pipe: the parent returns (the daemon does not
	// hold the pipe) and says why the log is lost.
	var pipe bytes.Buffer
	pidFile = filepath.Join(spool, "pipe.pid")
	cmd = exec.Command(bin, args("pipe", "-p", pidFile)...)
	cmd.Env, cmd.Stderr, cmd.WaitDelay = env, &pipe, wait.Timeout
	err = cmd.Run()
	if b, rerr := os.ReadFile(pidFile); rerr == nil {
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
			defer syscall.Kill(pid, syscall.SIGTERM)
		}
	}
	if errors.Is(err, exec.ErrWaitDelay) {
		t.Fatalf("the daemon held its parent's stderr pipe: %q", pipe.String())
	}
	if err != nil || !strings.Contains(pipe.String(), "cannot reach syslog (dial unixgram "+noSyslog+": ") || !strings.Contains(pipe.String(), "the daemon's log is discarded") {
		t.Errorf("detached, stderr a pipe: %v %q", err, pipe.String())
	}
}
